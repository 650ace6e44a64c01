"""Stream fences on a model's lazy state (``docs/generation.md``, "CUDA: stream fences").

mlx-lm's Llama-3 RoPE keeps its frequencies as a lazy ``_freqs`` built on the default stream; ``load_model``
evaluates the parameters only, so the first prefill chunk computes them there while ``generate_step`` runs on its
own stream. MLX commits a command buffer at every reader (``graph-commits.jsonl``: 48 buffers of 20, 9 or 25 and 4
nodes for bf16 Llama-3.2-1B's 1K chunk, whatever ``MLX_MAX_OPS_PER_BUFFER`` says), which cut that chunk's peak
to a third (``graph-fences.jsonl``).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

from kvsim.core.paths import REPO_DATA_DIR
from kvsim.generation.config import load_model_config
from kvsim.generation.model import build_model, lazy_state
from kvsim.generation.predict import gpu_peak
from kvsim.generation.schedule import RecordedEval, Workload, fenced_state, record, replay, trace_settings
from kvsim.sim.allocator import Allocator
from kvsim.sim.eval_sim import Buffers, EvalState, run_eval
from kvsim.sim.graph import StepGraph
from kvsim.sim.profile import load_profile

KERNELS = REPO_DATA_DIR / "generation" / "mlx-cuda-0.32.4" / "kernels"
MIB = 1 << 20


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (KERNELS / name).read_text(encoding="utf-8").splitlines()]


def test_lazy_state_is_llama3_rope_frequencies_as_mlx_commits_them() -> None:
    """16 layers' frequencies of 20 kernels each, the first buffer MLX committed in the real chunk."""
    found = lazy_state(build_model(load_model_config("llama-3.2-1b-instruct")).model)
    assert [k for _, k in found] == [20] * 16
    real = next(r for r in _rows("graph-commits.jsonl") if r["config"] == "llama-3.2-1b-instruct" and "commits"
                in r["evals"][0])
    assert real["evals"][0]["nodes_per_commit"][0] == 20
    assert lazy_state(build_model(load_model_config("qwen3-0.6b")).model) == []


def test_only_the_first_prefill_chunk_computes_it_and_only_on_cuda() -> None:
    built = build_model(load_model_config("llama-3.2-1b-instruct"))

    def fenced(backend: str) -> list[int]:
        rec = record(built, Workload(4096, 2, prefill_step_size=2048), load_profile(backend))
        return [sum(a.fenced for a in e.graph.graph.arrays) for e in rec.events if isinstance(e, RecordedEval)]

    assert fenced("mlx-cuda")[0] == 16 and not any(fenced("mlx-cuda")[1:])
    assert not any(fenced("mlx-cpu"))


def _chain(fenced: bool) -> tuple[list[int], int]:
    """Six 1 MiB element-wise ops, the fourth also reading another stream's result: (the commits' node counts,
    the peak above the input)."""
    profile = load_profile("mlx-cuda")
    g, buffers = StepGraph(), Buffers(Allocator(profile))
    x = g.leaf(MIB, buffers.new(MIB, 0.0, refs=1))
    other = g.op("Fenced", [], 256, kernels=20)
    g.arrays[other].fenced = fenced
    prev = x
    for k in range(6):
        prev = g.op("Exp", [prev, other] if k == 3 else [prev], MIB)
    g.outputs.append(prev)
    state = EvalState(commit_nodes=[])
    base = buffers.alloc.active_bytes
    buffers.alloc.peak_bytes = base
    run_eval(g, {x: g.arrays[x].buffer_id}, buffers, profile, state)
    return state.commit_nodes, buffers.alloc.peak_bytes - base


def test_a_reader_of_another_streams_result_commits_the_open_buffer() -> None:
    """The fenced op runs in a buffer of its own: the chain is cut at its reader, 3 + 3 nodes; on the same
    stream it is one buffer of 6 nodes and the 20 kernels."""
    assert _chain(fenced=True)[0] == [3, 3]
    assert _chain(fenced=False)[0] == [26]


def _point_above_weights(built: object, w: Workload, fences: bool) -> int:
    """``predict``'s point for a generation whose first eval peaks, with or without stream fences."""
    profile = replace(load_profile("mlx-cuda"), model_stream_fences=fences)
    rec = record(built, w, profile)
    plays = [replay(rec, p).evals for p in (profile, profile.variant("low"), profile.variant("high"),
                                            profile.floor_variant())]
    return gpu_peak(profile, *plays)[0] - rec.weights_bytes


def test_fences_predict_the_measured_lazy_and_evaluated_first_chunks() -> None:
    """bf16 Llama-3.2-1B at 1K peaks 0.20-0.22 GB above its weights with its frequencies lazy and 0.63-0.64 GB
    with them evaluated first (warm processes): kvsim's point with fences and without them, each within 25%."""
    rows = [r for r in _rows("graph-fences.jsonl") if r["config"] == "llama-3.2-1b-instruct"]
    real = {state: statistics.median(r["evals"][0]["peak_above_start_bytes"] for r in rows
                                     if r["eval_state"] == state) for state in (False, True)}
    assert real[True] > 2.5 * real[False]
    built = build_model(load_model_config("llama-3.2-1b-instruct"))
    for fences, state in ((True, False), (False, True)):
        above = _point_above_weights(built, Workload(1024, 2), fences)
        assert abs(above / real[state] - 1) <= 0.25, (fences, above, real[state])


def test_a_quantized_model_is_played_with_its_fences() -> None:
    """The 4-bit Llama-3.2-1B's first eval peaks alike with its frequencies lazy (0.58, 0.64 GB above the weights)
    or evaluated first (0.648, twice; ``fences-quantized-1b.jsonl``, CUDA graphs on). kvsim traces its fences as a
    bf16 model's. The buffers they commit are not MLX tasks, so the host runs ahead until 42 are in flight
    (``model_max_pending_buffers``), and the point, that eval's fitted play, lies within 15% of both medians. Played
    fenced without the limit and at the halfway point it was 0.34, 45% under."""
    rows = [r for r in _rows("fences-quantized-1b.jsonl")
            if r["config"].endswith("llama-3.2-1b-instruct-4bit.json") and "MLX_USE_CUDA_GRAPHS" not in r["env"]]
    real = {state: statistics.median(r["evals"][0]["peak_above_start_bytes"] for r in rows
                                     if r["eval_state"] == state) for state in (False, True)}
    built = build_model(load_model_config("llama-3.2-1b-instruct-4bit"))
    settings = trace_settings(load_profile("mlx-cuda"))
    assert len(fenced_state(built, settings)) == len(lazy_state(built.model)) > 0
    above = _point_above_weights(built, Workload(1024, 2), fences=True)
    for state in (False, True):
        assert abs(above / real[state] - 1) <= 0.15, (state, above, real[state])
