"""A whole generation as mlx-lm 0.32.2 runs it, played through kvsim's simulator eval by eval.

mlx-lm's own ``generate_step`` drives the run on the stand-in model while ``kvsim.generation.trace``
records every op: its prefill chunks (``prefill_step_size`` tokens, the last prompt token left for the
first ``_step``), ``mx.eval`` of the caches' state after each chunk, ``mx.clear_cache()``, the KV
quantization of ``kv_bits``, and the decode steps with their ``mx.async_eval``. Each eval's graph goes
through ``kvsim.sim.eval_sim.run_eval`` (MLX's evaluation order, the backend allocator, the CPU worker's
task-completion frees) with the weights and the caches' held state as its starting active memory.
Decode evals in which no cache changes size repeat their predecessors' memory and are not played.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from kvsim.generation.model import BuiltModel
from kvsim.generation.trace import Trace, subgraph, tracing
from kvsim.sim.allocator import Allocator
from kvsim.sim.eval_sim import Buffers, EvalState, run_eval
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


@dataclass(slots=True)
class Playback:
    """Plays each eval ``generate_step`` makes and collects their peaks."""

    weights_bytes: int
    profile: BackendProfile
    trace: Trace
    cache: list[Any]
    evals: list[EvalPeak] = field(default_factory=list)
    last_sizes: tuple[int, ...] = ()
    decode_evals: int = 0

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
            return  # the last played decode step's graph, a row longer: its memory repeats
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
        alloc.reset_peak()
        run_eval(ev.graph, leaves, buffers, self.profile, EvalState())
        offset = next((c.offset for c in self.cache if isinstance(getattr(c, "offset", None), int)), 0)
        self.evals.append(EvalPeak(phase, offset, 0, self.weights_bytes + max(alloc.peak_bytes, kv_before),
                                   kv_before, sum(sizes)))


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
    """Play a generation on the stand-in model; return every played eval and the caches' final bytes.

    mlx-lm's ``generate_step`` itself runs the prefill, the first ``_step`` and the first decode step
    (up to its first ``yield``). The remaining decode steps follow its loop (``generate.py`` L446-461):
    a step in which some cache grows (or the KV cache is quantized) is traced and played; the others
    only advance the caches by one row, since their memory repeats the last played step's.
    """
    from mlx_lm.generate import generate_step, maybe_quantize_kv_cache
    from mlx_lm.models.cache import make_prompt_cache

    w = workload
    cache = cache if cache is not None else make_prompt_cache(built.model, max_kv_size=w.max_kv_size)
    prompt = mx.zeros((w.prompt_tokens,), mx.uint32)
    mx.eval(prompt)
    with tracing(profile.sdpa_kernels) as t:
        pb = Playback(built.weights_bytes, profile, t, cache)
        t.on_eval = pb.on_eval
        gen = generate_step(prompt, built.model, max_tokens=w.max_tokens, prompt_cache=cache,
                            prefill_step_size=w.prefill_step_size, kv_bits=w.kv_bits,
                            kv_group_size=w.kv_group_size, quantized_kv_start=w.quantized_kv_start)
        next(gen)
        gen.close()
        y = mx.zeros((1,), mx.uint32)
        for n in range(1, w.max_tokens):
            if n == w.max_tokens - 1 or _changes(cache, w):
                logits = built.model(y[None], cache=cache)[:, -1, :]  # _step, generate.py L403-426
                maybe_quantize_kv_cache(cache, w.quantized_kv_start, w.kv_group_size, w.kv_bits)
                logprobs = logits - mx.logsumexp(logits, keepdims=True)
                y = mx.argmax(logprobs, axis=-1)
                mx.async_eval(y, logprobs)
            else:
                _advance(cache, t)
    return pb.evals, sum(a.nbytes for a in cache_arrays(cache))


def _kv_like(c: Any) -> bool:
    return hasattr(c, "keys") and hasattr(c, "update_and_fetch") and type(c).__name__ in KV_CACHES


KV_CACHES = frozenset({"KVCache", "RotatingKVCache", "QuantizedKVCache", "ChunkedKVCache"})


def _changes(cache: list[Any], w: Workload) -> bool:
    """Whether the next decode step changes some cache's size (a growth, a KV quantization), or the
    caches are of a kind this module cannot step without the model."""
    for c in _flat(cache):
        if not _kv_like(c):
            if type(c).__name__ in ("ArraysCache", "MambaCache"):
                continue  # fixed-size state
            return True
        if c.keys is None:
            return True
        keys = c.keys[0] if isinstance(c.keys, tuple) else c.keys
        capacity = keys.shape[2]
        max_size = getattr(c, "max_size", None)
        if c.offset >= capacity and (max_size is None or capacity < max_size):
            return True
        if w.kv_bits is not None and type(c).__name__ == "KVCache" and c.offset >= w.quantized_kv_start:
            return True
    return False


def _advance(cache: list[Any], t: Trace) -> None:
    """Feed one stand-in row to every KV cache, untraced, and register their state as evaluated."""
    for c in _flat(cache):
        if not _kv_like(c):
            continue
        if isinstance(c.keys, tuple):
            b, h, _, packed = c.keys[0].shape
            k = v = mx.zeros((b, h, 1, packed * 32 // c.bits), c.keys[1].dtype)
        else:
            k = mx.zeros((*c.keys.shape[:2], 1, c.keys.shape[3]), c.keys.dtype)
            v = mx.zeros((*c.values.shape[:2], 1, c.values.shape[3]), c.values.dtype)
        t.depth += 1  # not recorded
        try:
            c.update_and_fetch(k, v)
        finally:
            t.depth -= 1
    for a in cache_arrays(cache):
        t.evaluated_leaf(a)


def _flat(cache: list[Any]) -> list[Any]:
    out = []
    for c in cache:
        out.extend(_flat(list(c.caches)) if hasattr(c, "caches") else [c])
    return out
