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


def play_generation(built: BuiltModel, workload: Workload, profile: BackendProfile) -> tuple[list[EvalPeak], int]:
    """Run ``generate_step`` on the stand-in model; return every played eval and the caches' final bytes."""
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    w = workload
    cache = make_prompt_cache(built.model, max_kv_size=w.max_kv_size)
    prompt = mx.zeros((w.prompt_tokens,), mx.uint32)
    mx.eval(prompt)
    with tracing(profile.sdpa_kernels) as t:
        pb = Playback(built.weights_bytes, profile, t, cache)
        t.on_eval = pb.on_eval
        for _ in generate_step(prompt, built.model, max_tokens=w.max_tokens, prompt_cache=cache,
                               prefill_step_size=w.prefill_step_size, kv_bits=w.kv_bits,
                               kv_group_size=w.kv_group_size, quantized_kv_start=w.quantized_kv_start):
            pass
    return pb.evals, sum(a.nbytes for a in cache_arrays(cache))
