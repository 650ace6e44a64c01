"""One ``mx.eval`` as a discrete-event run: a host that dispatches, a device that completes.

The host walks MLX's tape: each op allocates its output (or takes a donated input's
buffer), is dispatched, and drops its references to its inputs. The backend keeps each
input's buffer until the work holding it completes: a CPU task (``dispatches_per_task``
dispatches run by a worker thread) or a GPU command buffer (committed every
``commit_ops`` ops or ``commit_elements`` input elements, freed ``completion_lag_s`` after
it finishes). The host waits while more than ``max_active_tasks`` tasks are in flight, and for a command
buffer holding an op that ``waits`` (``BackendProfile.model_waiting_gemms``). An op that reads a ``fenced``
array (another stream's result in the same eval, ``BackendProfile.model_stream_fences``) waits on its fence:
the open buffer is committed (not an in-flight task) and the host waits for that stream's buffer, which runs
beside this stream's work (MLX's ``eval_impl`` ``needs_fence``, ``Fence::wait``; the commits are measured,
``docs/generation.md``, "CUDA: stream fences"). Neither a fence's commits nor the fenced buffers are MLX tasks,
so the throttle does not hold them; where ``max_pending_buffers`` command buffers of any kind are in flight, the
next commit waits for the oldest to complete (CUDA's ``cuGraphLaunch`` blocks: "CUDA: a first eval traced").
Frees land at their completion times, mallocs at host times; the allocator sees them in
time order, which is what decides the peak.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from kvsim.sim.allocator import Allocator
from kvsim.sim.graph import VIEW_PRIMS, StepGraph
from kvsim.sim.graph_cache import GraphCache
from kvsim.sim.profile import BackendProfile
from kvsim.sim.tape import execution_order

DONATION_EXTRA_BYTES = 16384  # MLX's ``is_donatable(in, out)``: in's buffer at most out.nbytes() + this
COPY_DONATING = frozenset({"SliceUpdate"})
"""GPU ops that copy their first input into their output through ``copy_gpu`` (``backend/cuda/copy.cu``): where
the output takes that input's buffer no copy runs, so MLX neither reads the input nor counts it toward the
command buffer (``set_input_array`` is ``copy_gpu_inplace``'s). Played where elements are counted as MLX counts
them (``model_mlx_elements``, CUDA); Metal's ``copy.cpp`` does the same, but kvsim's unmeasured Metal count
(every input's bytes / 2, where MLX counts each buffer's elements once) is left as it is. A KV cache's
update writes a chunk's rows in place: at 32K tokens bf16 Llama-3.1-8B's chunk counted 2.1 G elements of
caches it never reads, two command buffers of 19 (``docs/generation.md``, "CUDA: long prompts")."""


def donatable(length_bytes: int, nbytes: int) -> bool:
    """Whether a buffer of ``length_bytes`` may hold an op's ``nbytes`` output (MLX's donation rule)."""
    return nbytes <= length_bytes <= nbytes + DONATION_EXTRA_BYTES


@dataclass(slots=True)
class Buffer:
    length_bytes: int
    refs: int = 0
    label: tuple[int, str] | None = None


@dataclass(slots=True)
class Buffers:
    """Live buffers with reference counts; a buffer is freed when its count drops to 0."""

    alloc: Allocator
    on_event: Callable[[str, Buffer, float], None] | None = None
    table: dict[int, Buffer] = field(default_factory=dict)
    next_id: int = 0  # the id the next buffer gets

    def new(self, nbytes: int, t: float, label: tuple[int, str] | None = None, refs: int = 0) -> int:
        bid = self.next_id
        self.next_id = bid + 1
        self.table[bid] = buf = Buffer(self.alloc.malloc(nbytes), refs, label)
        if self.on_event and label is not None:
            self.on_event("alloc", buf, t)
        return bid

    def incref(self, bid: int) -> None:
        self.table[bid].refs += 1

    def decref(self, bid: int, t: float) -> None:
        buf = self.table[bid]
        buf.refs -= 1
        if not buf.refs:
            del self.table[bid]
            self.alloc.free(buf.length_bytes)
            if self.on_event and buf.label is not None:
                self.on_event("free", buf, t)


@dataclass(slots=True)
class EvalState:
    """Scheduler state that carries over between evals: the CPU encoder's dispatch phase and,
    within a step, the clock, the device's busy time and frees still pending (a GPU completion
    handler may free a barrier eval's inputs after ``mx.eval`` has returned)."""

    dispatch_phase: int = 0
    clock_s: float = 0.0
    device_free_s: float = 0.0
    frees: deque[tuple[float, list[int]]] = field(default_factory=deque)  # (time, buffer ids), in time order
    commit_nodes: list[int] | None = None  # when a list: each GPU commit appends its graph's nodes
    graph_cache: GraphCache | None = None  # CUDA, a process's first eval: a buffer of a new structure waits for the device


def run_eval(
    g: StepGraph,
    leaf_buffers: dict[int, int],
    buffers: Buffers,
    profile: BackendProfile,
    state: EvalState,
    synchronize: bool = True,
) -> tuple[dict[int, int], float]:
    """Evaluate ``g.outputs``; return {array id: buffer id} of Python-held arrays and the
    simulated seconds it took.

    Args:
        g: The step graph (creation order = Python program order).
        leaf_buffers: Buffer ids of persistent leaves (pool, cache state) by array id;
            their references are transferred to the graph.
        buffers: Live buffers and the allocator.
        profile: Backend rules and timing.
        state: Scheduler state carried between evals.
        synchronize: ``mx.eval`` then ``mx.synchronize()`` (every free lands); otherwise a bare
            ``mx.eval``, which returns when the device finishes, before late frees.

    Why a hand-written queue, not simpy (issue #16): ``kvsim.sim.eval_simpy`` plays the same model as
    simpy processes (host, device, completion events, the in-flight throttle a ``simpy.Resource``) with
    identical results, but costs 2.84x the CPU time on a DS4 1M-token decode prediction (0.229 s against
    0.081 s) and 2.69x on 100 of them (27.1 s against 10.1 s), over the 1.5x allowed
    (``tests/bench/test_bench_simpy.py``, one process, best of 3). simpy orders sessions instead
    (``kvsim.sim.sessions``), where concurrency is the point.
    """
    arrays = g.arrays
    frees = state.frees  # completions free in queue order: their times never decrease, so a FIFO
    start_t = host_t = state.clock_s
    order, buf_of, pending = prepare(g, leaf_buffers, buffers, profile, host_t)
    decref, table = buffers.decref, buffers.table

    def drain(until: float) -> None:
        while frees and frees[0][0] <= until:  # noqa: SIM113
            t, bids = frees.popleft()
            for b in bids:
                buf = table[b]
                if buf.refs > 1:  # Buffers.decref without the call, where nothing is freed
                    buf.refs -= 1
                else:
                    decref(b, t)

    device_free_t = state.device_free_s
    task_ends: deque[float] = deque()  # completion times (nondecreasing) of tasks in flight
    # GPU: every command buffer in flight, tasks or not, in launch order; a slot frees when the oldest completes. The
    # fences chain the two streams: in the trace each layer's 2-node fence graph ran as long as the 69-node graph
    # beside it and ended with it (DeepSeek-V2-Lite 4-bit, kernels/first-eval-trace.tar.xz), so slots free in order.
    pending_ends: deque[float] = deque()
    open_held: list[int] = []  # GPU: buffers the open command buffer holds
    open_ops = 0
    open_elements = 0
    open_work_s = 0.0
    open_waits = False

    def commit(t: float, task: bool = True) -> float:
        """Close the open GPU command buffer: it runs after the device's last work, then frees what it held.
        ``task``: MLX counts it toward ``MAX_ACTIVE_TASKS`` (``gpu::eval``'s commits; not a fence's)."""
        nonlocal device_free_t, open_held, open_ops, open_elements, open_work_s, open_waits
        if open_ops == 0:
            return t
        t = launch_slot(t)
        if cache is not None and cache.commit():  # instantiated: the host waits for the graphs in flight but the newest
            waited = list(pending_ends)[:len(pending_ends) - overlap] if overlap else [device_free_t, *pending_ends]
            t = max([t, *waited]) + profile.model_instantiate_s
            drain(t)
        end = max(device_free_t, t) + open_work_s
        device_free_t = end
        if state.commit_nodes is not None:
            state.commit_nodes.append(round(open_ops))
        done = end + profile.completion_lag_s
        if task:
            task_ends.append(done)
        pending_ends.append(done)
        frees.append((done, open_held))
        waits, open_waits = open_waits and waiting, False
        open_held, open_ops, open_elements, open_work_s = [], 0, 0, 0.0
        return done if waits else t

    max_pending, cache, overlap = profile.max_pending_buffers, state.graph_cache, profile.model_instantiate_overlap_buffers

    def launch_slot(t: float) -> float:
        """When a command buffer committed at ``t`` launches: once fewer than ``max_pending`` are in flight
        (``cuGraphLaunch`` blocks the host; 0: never)."""
        while pending_ends and pending_ends[0] <= t:
            pending_ends.popleft()
        if max_pending and len(pending_ends) >= max_pending:
            t = pending_ends.popleft()
            drain(t)
        return t

    node_s, kernel_s, dispatch_s = profile.host_node_s, profile.host_kernel_s, profile.device_dispatch_s
    sdpa_s = profile.host_sdpa_s
    bytes_per_s, max_tasks, per_task = profile.device_bytes_per_s, profile.max_active_tasks, profile.dispatches_per_task
    is_gpu, nodes_per_kernel = profile.is_gpu, profile.graph_nodes_per_kernel
    count_elements, waiting = profile.model_mlx_elements, profile.model_waiting_gemms
    stall_op = profile.host_stall_op  # analysis only (BackendProfile.host_stall_op); -1 in predictions
    malloc_rate, alloc, new = profile.host_malloc_bytes_per_s, buffers.alloc, buffers.new
    phase = state.dispatch_phase
    fence_done: dict[int, float] = {}  # arrays another stream computed in this eval -> when their buffer is done
    for k, a in enumerate(order):
        arr = arrays[a]
        ins, kernels = arr.inputs, arr.kernels
        # 1. the host reaches the op; completions due by then free their buffers first
        if k == stall_op:  # a busy host: the host thread waits while the worker catches up
            host_t = max(host_t, device_free_t)
        host_t += node_s + kernels * kernel_s
        if sdpa_s and arr.prim == "ScaledDotProductAttention":  # cuDNN's graph, added as a child (cudnn_utils.cpp)
            host_t += sdpa_s
        if fence_done and any(x in fence_done for x in ins):  # it reads another stream's result: a fence
            host_t = max(commit(host_t, task=False), *(fence_done[x] for x in ins if x in fence_done))
        if frees and frees[0][0] <= host_t:
            drain(host_t)
        # 2. its output: a view of its input, a donated input buffer, or a fresh allocation
        if arr.prim in VIEW_PRIMS:
            donated = None
            buf_of[a] = b = buf_of[ins[0]]
            table[b].refs += 1
        elif is_gpu or arr.siblings:
            donated, host_t = _output_buffer(a, arrays, buf_of, pending, buffers, profile, host_t,
                                             open_held if is_gpu else None)
        else:  # _output_buffer's path for a CPU op with one output, inlined
            donated, nbytes = None, arr.nbytes
            for pos in arr.donors:
                x = ins[pos]
                b = buf_of.get(x)
                if b is None or pending[x] != 1 or arrays[x].py_held:
                    continue
                buf = table[b]
                if buf.refs == 1 and nbytes <= buf.length_bytes <= nbytes + DONATION_EXTRA_BYTES:
                    donated = b
                    break
            if donated is not None:
                buf_of[a] = donated
                buf.refs += 1
                if arr.label is not None and buf.label is None:
                    buf.label = arr.label
            else:
                buf_of[a] = new(nbytes, host_t, arr.label, 1)
                if malloc_rate and alloc.fresh_bytes:  # a system allocation (pool growth) costs host time
                    host_t += alloc.fresh_bytes / malloc_rate
        # 3. the work holds its inputs until it completes: a CPU task, or the open GPU command buffer
        held, own = [], buf_of[a]  # cpu/eval.cpp: an input sharing the output's buffer (a view, a donor) is not held
        for x in ins:
            b = buf_of.get(x)
            if b is not None and b != own and b not in held:
                held.append(b)
                table[b].refs += 1
        work_s = kernels * dispatch_s + arr.work_bytes / bytes_per_s
        if is_gpu and arr.fenced:  # another stream's buffer, committed by the fence's signal (not a task); it
            host_t = launch_slot(host_t)  # the fence's commit launches it on its stream: a buffer in flight
            fence_done[a] = host_t + work_s + profile.completion_lag_s  # runs beside this stream's work
            pending_ends.append(fence_done[a])
            frees.append((max(fence_done[a], frees[-1][0] if frees else 0.0), held))
        elif is_gpu:
            open_held.extend(held)
            if cache is not None:
                cache.add(a, ins, arr.gpu_nodes)
            open_ops += arr.gpu_nodes * nodes_per_kernel  # graph nodes: views launch none
            if kernels:  # MLX counts input elements, not bytes (2-byte elements where not known)
                if count_elements:
                    read = ins[1:] if arr.prim in COPY_DONATING and buf_of.get(ins[0]) == own else ins
                    open_elements += sum(e if (e := arrays[x].elements) >= 0 else arrays[x].nbytes // 2 for x in read)
                else:
                    open_elements += sum(arrays[x].nbytes for x in ins) // 2
            open_work_s += work_s
            open_waits |= arr.waits
            if not arr.inline and profile.needs_commit(open_ops, open_elements):  # MLX checks after each primitive
                host_t = commit(host_t)
        else:
            # kernels, then the holder whose completion frees the inputs
            device_free_t = (device_free_t if device_free_t > host_t else host_t) + work_s + dispatch_s
            if held:
                frees.append((device_free_t, held))
            phase += kernels + 1
            if phase >= per_task:  # a task completes with its 10th dispatch
                boundaries, phase = divmod(phase, per_task)
                task_ends.extend([device_free_t] * boundaries)
        # 4. MLX waits while more than max_active_tasks are in flight (transforms.cpp)
        while task_ends and task_ends[0] <= host_t:
            task_ends.popleft()
        if len(task_ends) > max_tasks:
            resumed = commit(host_t) if is_gpu else host_t  # a buffer that waits holds the host until it is done
            host_t = max(resumed, task_ends.popleft())
            drain(host_t)
        # 5. detach: an input no later op reads loses this reference
        for x in ins:
            n = pending[x] - 1
            pending[x] = n
            if not n and x in buf_of and not arrays[x].py_held:
                b = buf_of.pop(x)
                buf = table[b]
                if buf.refs > 1:
                    buf.refs -= 1
                else:
                    decref(b, host_t)
    state.dispatch_phase = phase
    if is_gpu:
        commit(host_t)
    end_t = _finish(g, buf_of, buffers, state, host_t, device_free_t, drain, synchronize)
    return {x: b for x, b in buf_of.items() if arrays[x].py_held}, end_t - start_t


@dataclass(frozen=True, slots=True)
class EvalPlan:
    """What ``prepare`` derives from a graph's shape alone (its sizes aside)."""

    order: list[int]  # MLX's tape order (``tape.execution_order``)
    pending: tuple[int, ...]  # per array: how many scheduled ops read it
    eager: tuple[int, ...]  # eager scalars, allocated while Python built the graph
    drops: tuple[int, ...]  # arrays nothing evaluated reaches: eager scalars, and leaves Python does not hold


MAX_PLANS = 256  # shapes kept; more are not expected (a shape is a sequence of layer topologies)
_plans: dict[Hashable, EvalPlan] = {}


def plan(g: StepGraph, profile: BackendProfile) -> EvalPlan:
    """The graph's ``EvalPlan``; kept per shape (``StepGraph.topology``) where the graph names one."""
    key = None if g.topology is None else (g.topology, profile.bfs_max_width)
    found = None if key is None else _plans.get(key)
    if found is not None:
        return found
    arrays = g.arrays
    order = execution_order(arrays, g.outputs, profile.bfs_max_width)
    scheduled = set(order) | {s for a in order for s in arrays[a].siblings}
    pending = [0] * len(arrays)
    for a in order:
        for x in arrays[a].inputs:
            pending[x] += 1
    reachable = _reachable(g, scheduled)
    eager = tuple(i for i, arr in enumerate(arrays) if arr.eager)
    drops = tuple(i for i, arr in enumerate(arrays) if i not in reachable and (arr.eager or not arr.prim))
    found = EvalPlan(order, tuple(pending), eager, drops)
    if key is not None:
        if len(_plans) >= MAX_PLANS:
            _plans.clear()
        _plans[key] = found
    return found


def clear_plans() -> None:
    _plans.clear()


def prepare(
    g: StepGraph, leaf_buffers: dict[int, int], buffers: Buffers, profile: BackendProfile, host_t: float
) -> tuple[list[int], dict[int, int], list[int]]:
    """MLX's tape order, each array's buffer so far, and how many scheduled ops read each array.

    Eager scalars were allocated while Python built the graph; those no op reaches are dropped at once, as are
    unreachable arrays that Python does not hold.
    """
    arrays = g.arrays
    for o in g.outputs:
        arrays[o].py_held = True
    p = plan(g, profile)
    buf_of: dict[int, int] = dict(leaf_buffers)
    for i in p.eager:
        buf_of[i] = buffers.new(arrays[i].nbytes, host_t, refs=1)
    for i in p.drops:
        arr = arrays[i]
        if arr.eager or (i in buf_of and not arr.py_held):
            buffers.decref(buf_of.pop(i), host_t)
    return p.order, buf_of, list(p.pending)


def _output_buffer(
    a: int, arrays: list, buf_of: dict[int, int], pending: list[int], buffers: Buffers, profile: BackendProfile,
    host_t: float, open_held: list[int] | None,
) -> tuple[int | None, float]:
    """Give op ``a`` its output buffer; return the donated input buffer (or ``None``) and the host's time.

    A GPU op first takes its kernels' own temporaries (held by the open command buffer, ``open_held``) and
    its siblings' buffers. It may take an input's buffer when that input has no other reader and the sizes fit
    (MLX's ``is_donatable``); else it allocates, and a system allocation costs host time.
    """
    arr = arrays[a]
    new, table = buffers.new, buffers.table
    if open_held is not None and arr.gpu_temps_bytes:  # freed with the command buffer
        open_held.extend(new(n, host_t, refs=1) for n in arr.gpu_temps_bytes)
    for sib in arr.siblings:  # other outputs of a multi-output primitive
        buf_of[sib] = new(arrays[sib].nbytes, host_t, arrays[sib].label, 1)
    donated = None
    for pos in arr.donors:
        x = arr.inputs[pos]
        b = buf_of.get(x)
        if b is None or pending[x] != 1 or arrays[x].py_held:
            continue
        buf = table[b]
        if buf.refs == 1 and donatable(buf.length_bytes, arr.nbytes):
            donated = b
            break
    if donated is not None:
        buf_of[a] = donated
        buf = table[donated]
        buf.refs += 1
        if arr.label is not None and buf.label is None:
            buf.label = arr.label
        return donated, host_t
    buf_of[a] = new(arr.nbytes, host_t, arr.label, 1)
    malloc_rate = profile.host_malloc_bytes_per_s
    if malloc_rate and buffers.alloc.fresh_bytes:  # a system allocation (pool growth) costs host time
        host_t += buffers.alloc.fresh_bytes / malloc_rate
    return None, host_t


def _finish(
    g: StepGraph, buf_of: dict[int, int], buffers: Buffers, state: EvalState, host_t: float, device_free_t: float,
    drain: Callable[[float], None], synchronize: bool,
) -> float:
    """End the eval: with ``mx.synchronize()`` every free lands; a bare ``mx.eval`` returns when the device is
    done, leaving late frees pending. Arrays Python does not hold are released. Returns the end time."""
    frees = state.frees
    if synchronize:
        end_t = max(host_t, device_free_t, frees[-1][0] if frees else host_t)
        drain(float("inf"))
        state.clock_s = state.device_free_s = 0.0
    else:
        end_t = max(host_t, device_free_t)
        drain(end_t)
        state.clock_s, state.device_free_s = end_t, device_free_t
    for x in list(buf_of):
        if not g.arrays[x].py_held:
            buffers.decref(buf_of.pop(x), end_t)
    return end_t


def _reachable(g: StepGraph, scheduled: set[int]) -> set[int]:
    """Arrays the evaluated ops (or Python) still reference."""
    seen = set(scheduled) | set(g.outputs)
    for a in scheduled:
        seen.update(g.arrays[a].inputs)
    seen.update(i for i, arr in enumerate(g.arrays) if arr.py_held)
    return seen
