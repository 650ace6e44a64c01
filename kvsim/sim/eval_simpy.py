"""``eval_sim.run_eval`` with simpy ordering the events: a host process, a device process, completions.

The same model as the hand-written queue (``kvsim.sim.eval_sim``), written as simpy processes so the
two can be compared (issue #16). The host process walks MLX's tape, spending ``host_node_s`` per op,
and hands work to the device through a ``simpy.Store``; the device process runs it in order (CPU: an
op's kernels, then the holder whose completion frees its inputs; GPU: a committed command buffer,
whose completion handler fires ``completion_lag_s`` later as its own event). Tasks in flight hold a
slot of a ``simpy.Resource`` of ``max_active_tasks`` slots; the host waits for a slot when one more
is in flight (MLX's wait in ``transforms.cpp``).

Ties: the hand-written queue lands frees due at or before the host's time before the host's next
malloc, so completions are scheduled ``URGENT`` and the host's steps ``NORMAL``. Completions are
pushed at their exact time (``Clock.at``): ``timeout(t - now)`` may miss ``t`` by an ulp.

One ordering differs, by design of a simpy host: a free that lands while the host pays for a system
allocation (``host_malloc_bytes_per_s``) lands before that op's inputs are detached, not after. Both
happen before the next malloc, so active bytes at every malloc, hence peaks, are the same.

Whole-model graphs on CUDA (``BackendProfile.model_mlx_elements``, ``model_waiting_gemms``,
``model_stream_fences``: elements as MLX counts them, a host that waits for a float32 GEMM's buffer, stream
fences) are played by ``eval_sim`` alone; the comparison covers the KV workload's graphs, which set none (their
arrays keep ``elements`` -1 and ``waits`` and ``fenced`` off).
"""

from __future__ import annotations

from collections.abc import Generator
from heapq import heappush
from typing import Any

import simpy
from simpy.events import NORMAL, URGENT, Event

from kvsim.sim.eval_sim import Buffers, EvalState, donatable, prepare
from kvsim.sim.graph import VIEW_PRIMS, StepGraph
from kvsim.sim.profile import BackendProfile


class Clock(simpy.Environment):
    """A simpy environment that can schedule an already-triggered event at an absolute time."""

    def at(self, t: float, priority: int = URGENT) -> Event:
        """An event processed at exactly ``t`` (simpy 4's queue entry, as ``Environment.schedule`` pushes it)."""
        ev = Event(self)
        ev._ok, ev._value = True, None
        heappush(self._queue, (t, priority, next(self._eid), ev))
        return ev


class _EvalRun:
    """One ``mx.eval``: the state its host, device and completion events share."""

    def __init__(self, env: Clock, g: StepGraph, order: list[int], buf_of: dict[int, int], pending: list[int],
                 buffers: Buffers, profile: BackendProfile, state: EvalState) -> None:
        self.env, self.g, self.order, self.buf_of, self.pending = env, g, order, buf_of, pending
        self.buffers, self.profile, self.state = buffers, profile, state
        self.jobs = simpy.Store(env)  # host -> device: CPU ops or GPU command buffers, in order
        self.throttle = simpy.Resource(env, capacity=profile.max_active_tasks)  # tasks in flight
        self.completions: list[tuple[Event, float, list[int]]] = []  # scheduled frees, to carry over
        self.device_free_s = state.device_free_s
        self.device_busy = False
        self.idle: Event | None = None  # succeeds when the device runs out of work (host_stall_op)
        self.host_end_s = env.now
        self.open_held: list[int] = []  # GPU: buffers the open command buffer holds
        self.open_ops, self.open_elements, self.open_work_s = 0, 0, 0.0

    # ---- completions ----------------------------------------------------------------------------
    def complete(self, t: float, held: list[int], tasks: list[Any]) -> None:
        """Work done at ``t``: its held buffers lose a reference, its task slots free up."""
        decref = self.buffers.decref
        for b in held:
            decref(b, t)
        for req in tasks:
            if req.triggered:
                self.throttle.release(req)
            else:  # never granted: it leaves the queue
                req.cancel()

    def complete_at(self, t: float, held: list[int], tasks: list[Any], not_before: float) -> None:
        """A completion handler firing at ``t`` (a free carried from an earlier eval fires at once)."""
        ev = self.env.at(max(t, not_before))
        ev.callbacks.append(lambda _ev: self.complete(t, held, tasks))
        self.completions.append((ev, t, held))

    # ---- the device -----------------------------------------------------------------------------
    def device(self) -> Generator[Event, Any, None]:
        """Runs the host's work in order; ends on ``None``."""
        env, p = self.env, self.profile
        if self.device_free_s > env.now:  # still busy with an earlier eval's work
            self.device_busy = True
            yield env.at(self.device_free_s)
        while True:
            self.device_busy = bool(self.jobs.items)  # a queued job is taken at once
            if self.idle is not None and not self.device_busy:
                self.idle.succeed()
                self.idle = None
            job = yield self.jobs.get()
            if job is None:
                return
            self.device_busy = True
            work_s, held, tasks = job
            yield env.at(env.now + work_s)  # the kernels (a GPU: the command buffer)
            if p.is_gpu:
                self.device_free_s = env.now
                self.complete_at(env.now + p.completion_lag_s, held, tasks, env.now)
            else:
                yield env.at(env.now + p.device_dispatch_s)  # the holder, whose completion frees the inputs
                self.device_free_s = env.now
                self.complete(env.now, held, tasks)

    # ---- the host -------------------------------------------------------------------------------
    def host(self) -> Generator[Event, Any, None]:
        env, p, arrays = self.env, self.profile, self.g.arrays
        node_s, kernel_s, sdpa_s, malloc_rate = p.host_node_s, p.host_kernel_s, p.host_sdpa_s, p.host_malloc_bytes_per_s
        throttle, alloc = self.throttle, self.buffers.alloc
        for k, a in enumerate(self.order):
            arr = arrays[a]
            if k == p.host_stall_op and (self.device_busy or self.jobs.items):  # analysis: the host waits
                self.idle = env.event()  # for the worker to catch up (BackendProfile.host_stall_op)
                yield self.idle
            attention_s = sdpa_s if arr.prim == "ScaledDotProductAttention" else 0.0  # as eval_sim.run_eval
            yield env.timeout(node_s + arr.kernels * kernel_s + attention_s)  # frees due by now have landed (URGENT)
            _, fresh = self.place(a)
            if fresh and malloc_rate and alloc.fresh_bytes:  # a system allocation costs host time
                yield env.timeout(alloc.fresh_bytes / malloc_rate)
            held = self.hold(a)
            self.submit(a, held)
            if len(throttle.users) + len(throttle.queue) > p.max_active_tasks:
                if p.is_gpu:
                    self.commit()
                yield throttle.queue[0]  # the oldest waiting task gets a slot when one completes
            self.detach(a)
        if p.is_gpu:
            self.commit()
        self.host_end_s = env.now
        yield self.jobs.put(None)

    def place(self, a: int) -> tuple[int | None, bool]:
        """The op's output buffer: a view's input, a donated input, or a malloc. Returns (donated, malloced)."""
        arrays, buf_of, table, new, now = self.g.arrays, self.buf_of, self.buffers.table, self.buffers.new, self.env.now
        arr = arrays[a]
        if arr.prim in VIEW_PRIMS:
            buf_of[a] = b = buf_of[arr.inputs[0]]
            table[b].refs += 1
            return None, False
        if self.profile.is_gpu and arr.gpu_temps_bytes:  # the kernels' own temporaries, freed with the command buffer
            self.open_held.extend(new(n, now, refs=1) for n in arr.gpu_temps_bytes)
        for sib in arr.siblings:  # other outputs of a multi-output primitive
            buf_of[sib] = new(arrays[sib].nbytes, now, arrays[sib].label, 1)
        for pos in arr.donors:
            x = arr.inputs[pos]
            b = buf_of.get(x)
            if b is None or self.pending[x] != 1 or arrays[x].py_held:
                continue
            buf = table[b]
            if buf.refs == 1 and donatable(buf.length_bytes, arr.nbytes):
                buf_of[a] = b
                buf.refs += 1
                if arr.label is not None and buf.label is None:
                    buf.label = arr.label
                return b, False
        buf_of[a] = new(arr.nbytes, now, arr.label, 1)
        return None, True

    def hold(self, a: int) -> list[int]:
        """Input buffers the op's work keeps alive until it completes."""
        held: list[int] = []
        table = self.buffers.table
        own = self.buf_of[a]  # cpu/eval.cpp: an input sharing the output's buffer (a view, a donor) is not held
        for x in self.g.arrays[a].inputs:
            b = self.buf_of.get(x)
            if b is not None and b != own and b not in held:
                held.append(b)
                table[b].refs += 1
        return held

    def submit(self, a: int, held: list[int]) -> None:
        """CPU: the op goes to the device, with the task slots it completes. GPU: it joins the command buffer."""
        p, arrays, arr = self.profile, self.g.arrays, self.g.arrays[a]
        work_s = arr.kernels * p.device_dispatch_s + arr.work_bytes / p.device_bytes_per_s
        if p.is_gpu:
            self.open_held.extend(held)
            self.open_ops += arr.gpu_nodes * p.graph_nodes_per_kernel  # graph nodes: views launch none
            if arr.kernels:  # MLX counts input elements, not bytes (2-byte elements assumed)
                self.open_elements += sum(arrays[x].nbytes for x in arr.inputs) // 2
            self.open_work_s += work_s
            if not arr.inline and p.needs_commit(self.open_ops, self.open_elements):
                self.commit()
            return
        boundaries, self.state.dispatch_phase = divmod(self.state.dispatch_phase + arr.kernels + 1, p.dispatches_per_task)
        self.jobs.put((work_s, held, [self.throttle.request() for _ in range(boundaries)]))

    def commit(self) -> None:
        """GPU: the open command buffer goes to the device as one task."""
        if self.open_ops == 0:
            return
        if self.state.commit_nodes is not None:
            self.state.commit_nodes.append(round(self.open_ops))
        self.jobs.put((self.open_work_s, self.open_held, [self.throttle.request()]))
        self.open_held, self.open_ops, self.open_elements, self.open_work_s = [], 0, 0, 0.0

    def detach(self, a: int) -> None:
        """An input no later op reads loses the graph's reference."""
        arrays, pending, buf_of = self.g.arrays, self.pending, self.buf_of
        for x in arrays[a].inputs:
            pending[x] -= 1
            if pending[x] == 0 and not arrays[x].py_held and x in buf_of:
                self.buffers.decref(buf_of.pop(x), self.env.now)


def run_eval(
    g: StepGraph,
    leaf_buffers: dict[int, int],
    buffers: Buffers,
    profile: BackendProfile,
    state: EvalState,
    synchronize: bool = True,
) -> tuple[dict[int, int], float]:
    """``kvsim.sim.eval_sim.run_eval`` under simpy: same arguments, same results."""
    arrays = g.arrays
    start_t = state.clock_s
    env = Clock(initial_time=start_t)
    order, buf_of, pending = prepare(g, leaf_buffers, buffers, profile, start_t)  # the same tape and readers

    # ---- run: the host and the device; frees an earlier eval left pending fire in their turn
    run = _EvalRun(env, g, order, buf_of, pending, buffers, profile, state)
    env.process(run.host())
    device = env.process(run.device())
    for t, bids in state.frees:
        run.complete_at(t, bids, [], start_t)
    state.frees.clear()
    env.run(until=device)
    end_t = max(run.host_end_s, run.device_free_s)
    if synchronize:
        env.run()  # mx.synchronize(): every completion handler runs
        end_t = max(end_t, env.now)
        state.clock_s = state.device_free_s = 0.0
    else:
        env.run(until=env.at(end_t, NORMAL))  # frees due by the time mx.eval returns
        state.frees.extend((t, held) for ev, t, held in run.completions if not ev.processed)
        state.clock_s, state.device_free_s = end_t, run.device_free_s

    # ---- finish: Python drops what it does not hold
    for x in list(buf_of):
        if not arrays[x].py_held:
            buffers.decref(buf_of.pop(x), end_t)
    return {x: b for x, b in buf_of.items() if arrays[x].py_held}, end_t - start_t
