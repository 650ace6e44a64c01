"""A whole generation as mlx-lm 0.32.2 runs it, played through kvsim's simulator eval by eval.

mlx-lm's own ``generate_step`` drives the run on the stand-in model while ``kvsim.generation.trace``
records every op: its prefill chunks (``prefill_step_size`` tokens, the last prompt token left for the
first ``_step``), ``mx.eval`` of the caches' state after each chunk, ``mx.clear_cache()``, the KV
quantization of ``kv_bits``, and the decode steps with their ``mx.async_eval``. Each eval's graph goes
through ``kvsim.sim.eval_sim.run_eval`` (MLX's evaluation order, the backend allocator, the CPU worker's
task-completion frees) with the weights and the caches' held state as its starting active memory.
Decode evals in which no cache changes size repeat their predecessors' memory and are not played.
The generation is traced once (``record``: each played eval's graph, ``mx.clear_cache()`` and the
repeated steps, in order) and played under each timing of its profile (``replay``): a GPU prediction
plays four timings of one trace.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from kvsim.generation.cache_carry import CarriedCache
from kvsim.generation.kernels import metal_kernels
from kvsim.generation.model import BuiltModel, lazy_state
from kvsim.generation.trace import EvalGraph, Trace, subgraph, tracing
from kvsim.sim.allocator import Allocator
from kvsim.sim.eval_sim import Buffers, EvalState, run_eval
from kvsim.sim.graph_cache import GraphCache
from kvsim.sim.profile import BackendProfile


@dataclass(frozen=True, slots=True)
class Workload:
    """What ``mlx_lm.generate`` is asked to do; defaults are mlx-lm 0.32.2's."""

    prompt_tokens: int
    """Prompt length N (token ids)."""
    max_tokens: int
    """Tokens to generate, K."""
    prefill_step_size: int = 2048
    """``--prefill-step-size``: prompt tokens per prefill chunk."""
    max_kv_size: int | None = None
    """``--max-kv-size``: a rotating cache of this many rows (models without ``make_cache``)."""
    kv_bits: int | None = None
    """``--kv-bits``: quantize the KV cache to this many bits once it holds ``quantized_kv_start`` rows."""
    kv_group_size: int = 64
    """``--kv-group-size``."""
    quantized_kv_start: int = 5000
    """``--quantized-kv-start`` (mlx-lm's ``DEFAULT_QUANTIZED_KV_START``)."""


@dataclass(frozen=True, slots=True)
class EvalPeak:
    """One played eval: its phase, the tokens the step fed, and its memory."""

    phase: str
    """``prefill`` (a chunk), ``first`` (the last prompt token's ``_step``) or ``decode``."""
    offset: int
    """Tokens the caches held before the step."""
    tokens: int
    peak_bytes: int
    """Peak active memory during the eval, weights included."""
    kv_before_bytes: int
    """Bytes of the caches' state held when the eval started."""
    kv_after_bytes: int
    cache_after_bytes: int = 0
    """``mx.get_cache_memory()`` when the eval ends (before any ``mx.clear_cache()`` that follows it)."""
    footprint_bytes: int = 0
    """Weights plus the largest active + cache bytes during the eval (what the process holds)."""


CLEAR = "clear"
"""An event of a recorded generation: ``mx.clear_cache()`` where ``generate_step`` calls it."""
REPEAT = "repeat"
"""An event: a decode step not played, which repeats the last played one's memory."""


@dataclass(frozen=True, slots=True)
class RecordedEval:
    """One eval ``generate_step`` makes that is played: its graph and what its ``EvalPeak`` reports."""

    graph: EvalGraph
    phase: str
    """``prefill``, ``first`` or ``decode``."""
    offset: int
    """Tokens the caches held when the step ran."""
    kv_after_bytes: int
    """Bytes of the caches' state after the step."""


Event = RecordedEval | str
"""A recorded eval, ``CLEAR`` or ``REPEAT``, in the order ``generate_step`` makes them."""


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """What a trace takes from the profile it is recorded under; the rest of a profile only times the plays."""

    sdpa_kernels: str
    """The backend's fused attention kernels (and, ``metal``, mlx-lm's Metal-only kernels: ``kernels.py``)."""
    bytes_per_flop: float
    """A matmul's arithmetic as bytes moved (``Trace.op``): the profile's ``device_bytes_per_s / matmul_flops_per_s``."""
    cpu: bool
    """Ops follow the CPU backend's implementations (``Trace.cpu``)."""
    kernel_bytes_per_flop: tuple[tuple[str, float], ...] = ()
    """Traced primitives whose arithmetic the profile times at its own rate, and their bytes per flop."""
    stream_fences: bool = False
    """The model's lazy state is traced as another stream's ops that its first readers fence on
    (``BackendProfile.model_stream_fences``, ``kvsim.generation.model.lazy_state``)."""
    every_structure: bool = False
    """The prompt chunks whose structures a generation-wide graph cache meets are played too (``played_chunks``)."""
    kernel_call_bytes: tuple[tuple[str, float], ...] = ()
    """Kernels with a time per call beside their arithmetic (a quantized matmul per bits), as bytes."""
    roofline: bool = False
    """An op's device time is the larger of its bytes and its arithmetic (``BackendProfile.model_op_time``)."""
    mlx_nodes: bool = False
    """CUDA graph nodes and copies as MLX's encoder makes them (``BackendProfile.model_mlx_nodes``)."""

    def tracing(self) -> AbstractContextManager[Trace]:
        """``kvsim.generation.trace.tracing`` under these settings."""
        return tracing(self.sdpa_kernels, self.bytes_per_flop, self.cpu, self.kernel_bytes_per_flop,
                       self.kernel_call_bytes, self.roofline, self.mlx_nodes)


QUANTIZED_BITS = (4, 5, 6, 8)
"""The bits a quantized matmul may be timed at apart (``BackendProfile.quantized_matmul_<bits>bit_*``)."""
KERNEL_RATES = {  # a traced primitive -> the profile field with its arithmetic rate (0: matmul_flops_per_s)
    "quantized_matmul": "quantized_matmul_flops_per_s",
    "gather_mm": "gather_matmul_flops_per_s",
    "gather_qmm": "gather_qmm_flops_per_s",
    "ScaledDotProductAttention": "attention_flops_per_s",
}


def trace_settings(profile: BackendProfile) -> TraceSettings:
    """What a trace under ``profile`` takes from it, its whole-model rates (``generation_profile``) applied."""
    p = generation_profile(profile)
    bytes_per_s = p.device_bytes_per_s
    kernels = tuple((prim, bytes_per_s / getattr(p, field)) for prim, field in KERNEL_RATES.items()
                    if getattr(p, field) > 0)
    per_bits = [(bits, getattr(p, f"quantized_matmul_{bits}bit_call_s"),
                 getattr(p, f"quantized_matmul_{bits}bit_flops_per_s")) for bits in QUANTIZED_BITS]
    kernels += tuple((f"quantized_matmul/{bits}", bytes_per_s / rate) for bits, _, rate in per_bits if rate > 0)
    calls = tuple((f"quantized_matmul/{bits}", call_s * bytes_per_s) for bits, call_s, rate in per_bits
                  if rate > 0 and call_s > 0)
    return TraceSettings(p.sdpa_kernels, bytes_per_s / p.matmul_flops_per_s, not p.is_gpu, kernels,
                         p.model_stream_fences, graph_cache_scope(p) == "generation", calls,
                         p.model_op_time == "roofline", p.model_mlx_nodes and p.is_gpu)


@dataclass(frozen=True, slots=True)
class GenerationTrace:
    """A generation traced once (``record``), to be played under any timing of its profile (``replay``)."""

    settings: TraceSettings
    weights_bytes: int
    events: tuple[Event, ...]
    kv_bytes: int
    """The caches' bytes at the end."""
    unfused_attention_bytes: int = 0
    """``Trace.unfused_attention_bytes`` over the whole generation (GPU traces; 0 on the CPU's)."""

    @property
    def first_eval_fenced(self) -> bool:
        """Whether the first played eval reads another stream's result (the lazy state ``fenced_state`` gives)."""
        first = next((e for e in self.events if isinstance(e, RecordedEval)), None)
        return first is not None and any(a.fenced for a in first.graph.graph.arrays)


@dataclass(slots=True)
class Recorder:
    """Turns each eval ``generate_step`` makes into an event: its graph where it is played."""

    trace: Trace
    cache: list[Any]
    emit: Callable[[Event], None]
    last_sizes: tuple[int, ...] = ()
    decode_evals: int = 0

    def clear_cache(self) -> None:
        self.emit(CLEAR)

    def repeat_decode(self) -> None:
        self.emit(REPEAT)

    def on_eval(self, outputs: list[mx.array]) -> None:
        state = cache_arrays(self.cache)
        sizes = tuple(a.nbytes for a in state)
        ev = subgraph(self.trace, outputs, state + outputs)
        prefill = _is_state(outputs, state)
        grew, self.last_sizes = sizes != self.last_sizes, sizes
        if not any(a.prim for a in ev.graph.arrays):
            return  # an eval of arrays already computed (``mx.eval(y)`` after its ``async_eval``)
        phase = "prefill" if prefill else ("first" if not self.decode_evals else "decode")
        if not prefill:
            self.decode_evals += 1
        if phase == "decode" and not grew:
            self.repeat_decode()
            return  # the last played decode step's graph, a row longer: its memory repeats
        offset = next((c.offset for c in self.cache if isinstance(getattr(c, "offset", None), int)), 0)
        self.emit(RecordedEval(ev, phase, offset, sum(sizes)))


@dataclass(slots=True)
class Player:
    """Plays a generation's events through ``run_eval`` under one profile and collects their peaks."""

    weights_bytes: int
    profile: BackendProfile
    evals: list[EvalPeak] = field(default_factory=list)
    carry: CarriedCache = field(init=False)
    """MLX's buffer cache from eval to eval (``kvsim.generation.cache_carry``)."""
    commits: list[list[int]] | None = None
    """Analysis: where a list, each played eval appends its GPU command buffers' node counts."""
    graph_cache: GraphCache | None = field(init=False, default=None)
    """MLX's CUDA graph cache as this process meets it, where the profile plays one (``graph_cache_scope``)."""
    instantiated: list[int] = field(default_factory=list)
    """Per played eval, the command buffers it instantiated (new structures; 0 where no graph cache is played)."""
    later: BackendProfile = field(init=False)
    """The profile a process's evals after its first play under (``BackendProfile.later_evals``)."""
    first: BackendProfile = field(init=False)
    """The profile its first eval plays under (``BackendProfile.first_eval``)."""

    def __post_init__(self) -> None:
        self.carry = CarriedCache(self.profile)
        self.later = self.profile.later_evals()
        self.first = self.profile.first_eval()
        if graph_cache_scope(self.profile):
            self.graph_cache = GraphCache()

    def event(self, e: Event) -> None:
        if e == CLEAR:
            self.carry.clear()
        elif e == REPEAT:
            self.carry.repeat()
        else:
            self.play(e)

    def play(self, rec: RecordedEval) -> None:
        """One eval on a fresh allocator holding the buffers alive at its start and the carried cache."""
        ev = rec.graph
        alloc = Allocator(self.profile)
        buffers = Buffers(alloc)
        owned = {r: buffers.new(n, 0.0, refs=0) for r, n in ev.buffer_bytes.items()}
        leaves: dict[int, int] = {}
        for i, a in enumerate(ev.graph.arrays):
            if not a.prim:
                leaves[i] = owned[ev.leaf_buffers[i]] if i in ev.leaf_buffers else buffers.new(0, 0.0)
                buffers.incref(leaves[i])
        for bid in owned.values():  # held by Python but not read by this eval: alive throughout
            if not buffers.table[bid].refs:
                buffers.incref(bid)
        kv_before = alloc.active_bytes
        self.carry.install(alloc)  # the held state is in place: the cache earlier evals left
        alloc.reset_peak()
        alloc.footprint_peak_bytes = alloc.active_bytes + alloc.cache_bytes
        state_lengths = {bid: buffers.table[bid].length_bytes for bid in owned.values()}
        # the process's first eval meets MLX's graph cache empty; later evals meet it too where the profile's scope
        # is the generation (kvsim.sim.graph_cache; graph_cache_scope)
        cache = self.graph_cache if not self.evals or graph_cache_scope(self.profile) == "generation" else None
        state = EvalState(commit_nodes=None if self.commits is None else [], graph_cache=cache)
        seen = len(cache.seen) if cache is not None else 0
        run_eval(ev.graph, leaves, buffers, self.later if self.evals else self.first, state)
        self.instantiated.append(len(cache.seen) - seen if cache is not None else 0)
        if self.commits is not None:
            self.commits.append(state.commit_nodes)
        self.carry.played(alloc, rec.phase, [n for b, n in state_lengths.items() if b not in buffers.table])
        self.evals.append(EvalPeak(rec.phase, rec.offset, 0, self.weights_bytes + max(alloc.peak_bytes, kv_before),
                                   kv_before, rec.kv_after_bytes, alloc.cache_bytes,
                                   self.weights_bytes + alloc.footprint_peak_bytes))


class Playback:
    """Records each eval ``generate_step`` makes and plays it at once under one profile (no trace kept)."""

    def __init__(self, weights_bytes: int, profile: BackendProfile, trace: Trace, cache: list[Any]) -> None:
        self.player = Player(weights_bytes, profile)
        self.recorder = Recorder(trace, cache, self.player.event)

    @property
    def evals(self) -> list[EvalPeak]:
        return self.player.evals

    @property
    def carry(self) -> CarriedCache:
        return self.player.carry

    def on_eval(self, outputs: list[mx.array]) -> None:
        self.recorder.on_eval(outputs)

    def clear_cache(self) -> None:
        self.recorder.clear_cache()

    def repeat_decode(self) -> None:
        self.recorder.repeat_decode()


def _is_state(outputs: list[mx.array], state: list[mx.array]) -> bool:
    """Whether an eval's outputs are the caches' state (a prefill chunk's ``mx.eval([c.state ...])``)."""
    ids = {id(a) for a in state}
    return bool(outputs) and all(id(o) in ids or o.ndim >= 3 for o in outputs)


def cache_arrays(cache: list[Any]) -> list[mx.array]:
    """Every array the caches hold (their evaluated state between steps)."""
    out: list[mx.array] = []

    def walk(x: Any) -> None:
        if isinstance(x, mx.array):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            for y in x:
                walk(y)
        elif hasattr(x, "__dict__") and not isinstance(x, type):
            for v in vars(x).values():
                walk(v)

    walk(cache)
    return out


def play_generation(built: BuiltModel, workload: Workload, profile: BackendProfile,
                    cache: list[Any] | None = None) -> tuple[list[EvalPeak], int]:
    """Play a generation on the stand-in model; return every played eval and the caches' final bytes."""
    pb, kv = play(built, workload, profile, cache)
    return pb.evals, kv


def play(built: BuiltModel, workload: Workload, profile: BackendProfile,
         cache: list[Any] | None = None) -> tuple[Player, int]:
    """Play a generation on the stand-in model; return the player (its evals, the buffer cache at the end)
    and the caches' final bytes."""
    recorded = record(built, workload, profile, cache)
    return replay(recorded, profile), recorded.kv_bytes


def replay(recorded: GenerationTrace, profile: BackendProfile, commits: list[list[int]] | None = None) -> Player:
    """Play a recorded generation under ``profile``: any timing of the profile it was recorded under (its
    ``variant``s share its trace settings; ``floor_variant``'s device takes no time, so the matmuls' work
    bytes, the one setting it changes, time nothing: ``eval_sim.run_eval``'s ``work_bytes / bytes_per_s``).
    ``commits``: ``Player.commits``."""
    profile = generation_profile(profile)
    settings = trace_settings(profile)
    if not _replayable(recorded.settings, settings, profile):
        raise ValueError(f"profile: {profile.name}'s trace settings {settings} differ from the recorded "
                         f"{recorded.settings}")
    player = Player(recorded.weights_bytes, profile, commits=commits)
    for e in recorded.events:
        player.event(e)
    return player


def _replayable(recorded: TraceSettings, settings: TraceSettings, profile: BackendProfile) -> bool:
    """Whether a trace recorded with ``recorded`` plays as one made with ``settings`` would: the same, or a
    device that takes no time (the floor), where a matmul's arithmetic bytes move nothing."""
    if math.isinf(profile.device_bytes_per_s):
        return (replace(recorded, bytes_per_flop=0.0, kernel_bytes_per_flop=(), kernel_call_bytes=())
                == replace(settings, bytes_per_flop=0.0, kernel_bytes_per_flop=(), kernel_call_bytes=()))
    return recorded == settings


def fenced_state(built: BuiltModel, settings: TraceSettings) -> list[tuple[mx.array, int]]:
    """The lazy state a trace fences on (``lazy_state``): none without ``stream_fences``.

    Quantized models too. They were played unfenced until the limit on command buffers in flight was found
    (``BackendProfile.model_max_pending_buffers``): the fences' commits are not MLX tasks, so without it kvsim let
    a fenced first eval run unboundedly far ahead of the device, 15.97 GB above the weights for DeepSeek-V2-Lite 4-bit
    at 2,560 tokens against 10.99 real. With it the play reads 11.07 (``docs/generation.md``, "CUDA: a first eval
    traced").
    """
    if not settings.stream_fences:
        return []
    return lazy_state(built.model)


def record(built: BuiltModel, workload: Workload, profile: BackendProfile,
           cache: list[Any] | None = None) -> GenerationTrace:
    """Trace a generation on the stand-in model once, its evals recorded for ``replay``.

    Follows ``generate_step`` (mlx-lm 0.32.2 ``generate.py`` L431-461): prefill chunks of
    ``prefill_step_size`` (the last prompt token left over), each followed by ``quantize_cache_fn``,
    ``mx.eval`` of the caches' state and ``mx.clear_cache()``; the first ``_step``; then ``max_tokens``
    decode ``_step``s, each ``mx.async_eval``-ed. A step whose memory repeats an earlier one's at a smaller
    context is not played: prefill chunks between the first and the last two, and decode steps in which
    no cache changes size; they advance the caches by their rows untraced (where the caches allow it).
    Under ``stream_fences`` the model's lazy state (``fenced_state``) enters the trace unevaluated, built on
    another stream than ``generate_step``'s ``generation_stream``: the first eval that reads it computes it.
    """
    w = workload
    from mlx_lm.models.cache import make_prompt_cache

    settings = trace_settings(profile)
    cache = cache if cache is not None else make_prompt_cache(built.model, max_kv_size=w.max_kv_size)
    prompt = mx.zeros((1, w.prompt_tokens), mx.uint32)
    mx.eval(prompt)
    chunks = _chunks(w)
    events: list[Event] = []
    lazy = fenced_state(built, settings)
    with settings.tracing() as t, metal_kernels(t, profile):
        rec = Recorder(t, cache, events.append)
        t.on_eval = rec.on_eval
        t.register_leaves([v for _, v in tree_flatten(built.model.parameters())])
        for a, kernels in lazy:
            t.pending(a, kernels)
        played = played_chunks(len(chunks), settings.every_structure)
        for i, n in enumerate(chunks):
            if i in played or not _steppable(cache):
                built.model(prompt[:, :n], cache=cache)
                _quantize(cache, w)
                mx.eval([c.state for c in cache])
            else:
                _advance(cache, t, n, w)
            rec.clear_cache()  # generate.py L463
        y = _step(built, prompt[:, -1:], cache, w)  # the last prompt token
        for n in range(w.max_tokens):
            if n in (0, w.max_tokens - 1) or _changes(cache, w):
                y = _step(built, y[None], cache, w)
            else:
                _advance(cache, t, 1, w)
                rec.repeat_decode()
            if n % 256 == 0:
                rec.clear_cache()  # generate.py L479-480: every 256 tokens, from the first
    return GenerationTrace(settings, built.weights_bytes, tuple(events), sum(a.nbytes for a in cache_arrays(cache)),
                           t.unfused_attention_bytes)


def graph_cache_scope(profile: BackendProfile) -> str:
    """Which evals meet MLX's CUDA graph cache in a play under ``profile``: ``""`` (none: the CPU, Metal, or
    ``model_instantiate_s`` 0), ``"first"`` or ``"generation"`` (``BackendProfile.model_graph_cache_scope``)."""
    return profile.model_graph_cache_scope if profile.is_gpu and profile.model_instantiate_s > 0 else ""


def played_chunks(count: int, every_structure: bool = False) -> set[int]:
    """The prompt chunks a trace plays of ``count``: the first and the last two, the rest repeating the memory of a
    smaller context. ``every_structure``: also the second (the caches' first growth, whose structures MLX's graph
    cache meets first) and the one before the last two, whose structures the last two meet (``kvsim.sim.graph_cache``:
    a chunk's buffers that repeat its predecessor's are updated in place, the rest instantiated)."""
    ends = {0, count - 2, count - 1} | ({1, count - 3} if every_structure else set())
    return {i for i in ends if 0 <= i < count}


def generation_profile(profile: BackendProfile) -> BackendProfile:
    """``profile`` as it plays whole-model graphs: its in-flight task count (``model_max_active_tasks``) and
    command-buffer count (``model_max_pending_buffers``), the device's bandwidth and cost per kernel for a model's
    activations (``model_device_bytes_per_s``, ``model_device_dispatch_s``), the host's cost per node and launch
    (``model_host_node_s``, ``model_host_kernel_s``), its allocations' rate (``model_host_malloc_bytes_per_s``) and its
    range's share below the point (``model_range_low_share``), where it sets them: ``kvsim/data/profiles/<backend>.json``
    (``docs/generation.md``)."""
    p = profile
    fields = {"max_active_tasks": p.model_max_active_tasks, "max_pending_buffers": p.model_max_pending_buffers,
              "device_bytes_per_s": p.model_device_bytes_per_s, "device_dispatch_s": p.model_device_dispatch_s,
              "host_node_s": p.model_host_node_s, "host_kernel_s": p.model_host_kernel_s,
              "host_malloc_bytes_per_s": p.model_host_malloc_bytes_per_s, "range_low_share": p.model_range_low_share}
    return replace(p, **{k: v for k, v in fields.items() if v > 0})


def _chunks(w: Workload) -> list[int]:
    """Prefill chunk sizes: ``min(prefill_step_size, remaining)`` while more than one token remains."""
    out, left = [], w.prompt_tokens
    while left > 1:
        out.append(min(w.prefill_step_size, left - 1))
        left -= out[-1]
    return out


def _quantize(cache: list[Any], w: Workload) -> None:
    from mlx_lm.generate import maybe_quantize_kv_cache

    maybe_quantize_kv_cache(cache, w.quantized_kv_start, w.kv_group_size, w.kv_bits)


def _step(built: BuiltModel, tokens: mx.array, cache: list[Any], w: Workload) -> mx.array:
    """``generate_step``'s ``_step`` with the default (greedy) sampler, then its ``mx.async_eval``."""
    logits = built.model(tokens, cache=cache)[:, -1, :]
    _quantize(cache, w)
    logprobs = logits - mx.logsumexp(logits, keepdims=True)
    y = mx.argmax(logprobs, axis=-1)
    mx.async_eval(y, logprobs.squeeze(0))
    return y


def _steppable(cache: list[Any]) -> bool:
    """Whether every cache can be advanced untraced (KV caches, and fixed-size state)."""
    return all(_kv_like(c) or type(c).__name__ in FIXED_CACHES for c in _flat(cache))


FIXED_CACHES = frozenset({"ArraysCache", "MambaCache"})


def _kv_like(c: Any) -> bool:
    """mlx-lm's KV caches and kvsim's policy caches (``policies.mlx``): one row in, one row kept."""
    policy = hasattr(c, "policy") and hasattr(c, "capacity_rows") and not isinstance(c.keys, (tuple, list))
    return hasattr(c, "update_and_fetch") and (type(c).__name__ in KV_CACHES or policy)


KV_CACHES = frozenset({"KVCache", "RotatingKVCache", "QuantizedKVCache", "ChunkedKVCache"})


def _changes(cache: list[Any], w: Workload) -> bool:
    """Whether the next decode step changes some cache's size (a growth, a KV quantization), or the
    caches are of a kind this module cannot step without the model."""
    for c in _flat(cache):
        if not _kv_like(c):
            if type(c).__name__ in FIXED_CACHES:
                continue
            return True
        if c.keys is None:
            return True
        if hasattr(c, "policy") and hasattr(c, "capacity_rows"):  # policies.mlx: the policy's own rule
            if c.policy.grow(c.capacity_rows, c.offset, 1) is not None:
                return True
            continue
        keys = c.keys[0] if isinstance(c.keys, (tuple, list)) else c.keys
        capacity = keys.shape[2]
        max_size = getattr(c, "max_size", None)
        if c.offset >= capacity and (max_size is None or capacity < max_size):
            return True
        if w.kv_bits is not None and type(c).__name__ == "KVCache" and c.offset >= w.quantized_kv_start:
            return True
    return False


def _advance(cache: list[Any], t: Trace, rows: int, w: Workload) -> None:
    """Feed ``rows`` stand-in rows to every KV cache, untraced, as a step would; register the caches'
    state as evaluated (it keeps its buffers into the next played eval)."""
    t.depth += 1  # nothing here is recorded
    try:
        for c in _flat(cache):
            if not _kv_like(c):
                continue
            if c.keys is None:
                raise ValueError("an empty KV cache cannot be advanced untraced")
            if isinstance(c.keys, (tuple, list)):  # QuantizedKVCache: (packed uint32, scales, biases)
                k, v = (mx.zeros((*x[0].shape[:2], rows, x[0].shape[3] * 32 // c.bits), x[1].dtype)
                        for x in (c.keys, c.values))
            else:
                k = mx.zeros((*c.keys.shape[:2], rows, c.keys.shape[3]), c.keys.dtype)
                v = mx.zeros((*c.values.shape[:2], rows, c.values.shape[3]), c.values.dtype)
            c.update_and_fetch(k, v)
        _quantize(cache, w)
    finally:
        t.depth -= 1
    for a in cache_arrays(cache):
        t.evaluated_leaf(a)


def _flat(cache: list[Any]) -> list[Any]:
    out = []
    for c in cache:
        out.extend(_flat(list(c.caches)) if hasattr(c, "caches") else [c])
    return out
