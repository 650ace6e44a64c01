"""A generation's later prompt chunks, traced on an H200 (``kernels/chunk-trace.tar.xz``, CUPTI, ``chunk_trace.sh``;
``docs/generation.md``, "CUDA: a generation's later chunks traced"): which of them MLX's graph cache meets cold.

Each config ran its prompt's chunks twice in a fresh process, as ``generate_step`` runs them: pass 0 is a generation's
cold pass, pass 1 the same chunks again, warm.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import pytest
from cuda_runs import RUNS, predicted, profile_before_d, rows
from cupti_trace import read_trace

from kvsim.generation.config import load_model_config
from kvsim.generation.model import build_model
from kvsim.generation.schedule import Workload, played_chunks, record, replay
from kvsim.sim.profile import load_profile

TRACE = RUNS / "kernels" / "chunk-trace.tar.xz"
ROOT = Path(__file__).resolve().parents[1]
H9, H11, P = "docs/tools/device/heldout9", "docs/tools/device/heldout11", "kvsim/data/configs/public"
CONFIGS = {  # trace name -> (config, prompt tokens); every prompt in 2,048-token chunks
    "q4": (f"{P}/qwen3-4b-4bit.json", 8192),
    "mis6": (f"{H11}/mistral-7b-instruct-v0.3-6bit.json", 4096),
    "phi4": (f"{H9}/phi-3-mini-4k-instruct-4bit.json", 8192),
    "llama8": ("llama-3.1-8b-instruct", 8192),
    "l8q16": (f"{P}/llama-3.1-8b-4bit.json", 16384),
}


@dataclass(frozen=True)
class Chunk:
    """One traced chunk: its pass, offset, peak above the memory held before it, graphs launched and instantiated, and
    how many of those instantiations returned only once the device had finished every graph in flight."""

    run: int
    offset: int
    peak_above_bytes: int
    launches: int
    instantiations: int
    waited: int


@cache
def chunks(name: str) -> tuple[Chunk, ...]:
    trace = read_trace(TRACE, name)
    out = []
    for t in trace.timing:
        launches, instantiations = trace.within(t)
        waited = sum(1 for a, b in instantiations
                     if (running := [end for s, _, _, end in trace.launches if s < a < end]) and b >= max(running))
        out.append(Chunk(t["run"], t["offset"], t["peak_above_bytes"], len(launches), len(instantiations), waited))
    return tuple(out)


def test_a_later_chunk_instantiates_and_waits_as_a_first_eval_does() -> None:
    """The cold pass instantiates CUDA graphs in every chunk whose buffers are new structures, and those instantiations
    wait for the device as a first eval's do (more than half of them). Warm, the same chunks instantiate none but a
    fenced model's first: the cold pass's was cut at the fences of the model's lazy state, the warm one is not. A chunk that instantiates none peaks as warm (Qwen3-4B 4-bit's third, 6.35 GB, to 1 MB); one that
    instantiates most of its buffers peaks lower than warm: Mistral-7B 6-bit's second, 3.25 against 7.86 GB."""
    waited = instantiated = 0
    for name in CONFIGS:
        for c in chunks(name):
            if c.run == 1 and c.offset > 0:
                assert c.instantiations == 0, (name, c)
            elif c.offset > 0:
                waited, instantiated = waited + c.waited, instantiated + c.instantiations
    assert waited > instantiated / 2
    q4 = {(c.run, c.offset): c for c in chunks("q4")}
    assert q4[0, 4096].instantiations == 0 and abs(q4[0, 4096].peak_above_bytes - q4[1, 4096].peak_above_bytes) < 2**20
    mis6 = {(c.run, c.offset): c for c in chunks("mis6")}
    assert mis6[0, 2048].instantiations == 8 and mis6[0, 2048].peak_above_bytes < 0.45 * mis6[1, 2048].peak_above_bytes


def played(name: str) -> dict[int, tuple[tuple[int, int], tuple[int, int]]]:
    """Per prompt chunk kvsim plays (its offset): kvsim's (buffers, instantiations) and MLX's (launches,
    instantiations), with one graph cache for the generation (``model_graph_cache_scope`` "generation")."""
    profile = replace(load_profile("mlx-cuda"), model_graph_cache_scope="generation")
    config, tokens = CONFIGS[name]
    built = build_model(load_model_config(config))
    commits: list[list[int]] = []
    player = replay(record(built, Workload(tokens, 2), profile), profile, commits)
    real = [c for c in chunks(name) if c.run == 0]
    indices = sorted(played_chunks(len(real), every_structure=True))
    mine = [(len(b), n) for e, b, n in zip(player.evals, commits, player.instantiated) if e.phase == "prefill"]
    assert len(mine) == len(indices)
    return {real[i].offset: (m, (real[i].launches, real[i].instantiations)) for i, m in zip(indices, mine)}


def test_kvsims_keys_give_mlxs_instantiations_chunk_by_chunk() -> None:
    """kvsim's keys (``kvsim.sim.graph_cache``) instantiate, in the later chunks kvsim plays, the buffers MLX
    instantiated: 12 of 14 exactly, two one more (Llama-3.1-8B's last chunk; and the 4-bit one's seventh at 16K, which
    kvsim plays after its second and sixth chunks only). Each commits as many buffers as MLX launched. Unfenced first
    evals instantiate every buffer, as MLX's did; a fenced one (the first eval computes the model's lazy state)
    commits 64 buffers against MLX's 96 launches and instantiates 4 against 5."""
    exact = later = 0
    for name in CONFIGS:
        for offset, ((buffers, new), (launched, instantiated)) in played(name).items():
            if offset == 0 and name in ("llama8", "l8q16"):  # fenced
                assert (buffers, new, launched, instantiated) == (64, 4, 96, 5)
            elif offset == 0:
                assert buffers == launched == new == instantiated
            else:
                assert buffers == launched and new - instantiated in (0, 1), (name, offset, new, instantiated)
                exact, later = exact + (new == instantiated), later + 1
    assert (exact, later) == (12, 14)


def test_the_chunks_a_generation_wide_cache_plays() -> None:
    """Beside the first and the last two chunks, a generation-wide graph cache plays the second (the caches' first
    growth) and the one before the last two (whose structures the last two meet)."""
    assert played_chunks(8) == {0, 6, 7} and played_chunks(8, every_structure=True) == {0, 1, 5, 6, 7}
    assert played_chunks(4, every_structure=True) == {0, 1, 2, 3} and played_chunks(1, every_structure=True) == {0}


def test_a_cold_second_chunk_peaks_where_the_generation_wide_cache_plays_it() -> None:
    """Mistral-7B 6-bit at 4,096 tokens: its second chunk instantiates 8 of its 9 buffers and peaks 3.25 GB above the
    memory held before it (0.27 GB of caches), in the trace's cold pass as in mlx-lm's own loop (``loop-bisect.jsonl``).
    Played warm (scope "first") kvsim puts it at 6.92 GB above the weights; played through the generation's cache, at
    3.51, the real chunk's 3.25 + 0.27."""
    config, tokens = CONFIGS["mis6"]
    built = build_model(load_model_config(config))
    real = {(c.run, c.offset): c for c in chunks("mis6")}[0, 2048].peak_above_bytes
    above = {}
    for scope in ("first", "generation"):
        profile = replace(load_profile("mlx-cuda"), model_graph_cache_scope=scope)
        evals = replay(record(built, Workload(tokens, 2), profile), profile).evals
        above[scope] = evals[1].peak_bytes - built.weights_bytes - evals[1].kv_before_bytes
    assert above["first"] > 2 * real
    assert abs(above["generation"] / real - 1) < 0.02, (above, real)


def test_a_profile_names_its_graph_cache_scope_or_says_which_it_takes() -> None:
    from kvsim.sim.profile import overlay_profile

    base = load_profile("mlx-cuda")
    assert overlay_profile(base, {"model_graph_cache_scope": "generation"}, "p.json").model_graph_cache_scope == "generation"
    with pytest.raises(ValueError, match="model_graph_cache_scope.*'first' or 'generation', got 'generaton'"):
        overlay_profile(base, {"model_graph_cache_scope": "generaton"}, "p.json")


def _read_as_predicted(n: int, outs: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """Held-out set ``n``: its runs beside both committed predictions (``outs``: the runs out of range under each);
    the model of its time (the profile before candidate D) predicts the shipped file's, value for value. Returns each
    rule's errors by config file."""
    runs, errors = rows(f"heldout{n}.jsonl"), {}
    for rule, want in outs.items():
        stored = {(p["name"], p["prompt_tokens"]): p for p in rows(f"predictions/heldout{n}{rule}.jsonl")}
        assert len(runs) == len(stored) == (7 if n == 22 else 9)
        pairs = [(r, stored[r["name"], r["prompt_tokens"]]) for r in runs]
        out = [r["name"] for r, p in pairs if not p["peak_low_bytes"] <= r["peak_bytes"] <= p["peak_high_bytes"]]
        assert out == want, (n, rule, out)
        errors[rule] = {r["name"].split("/")[-1]: p["peak_bytes"] / r["peak_bytes"] - 1 for r, p in pairs}
    shipped = {s["name"]: s for s in rows(f"predictions/heldout{n}.jsonl")}
    for row, p in predicted(runs, profile_before_d()):
        assert (p.peak_bytes, p.peak_low_bytes, p.peak_high_bytes) == tuple(
            shipped[row["name"]][k] for k in ("peak_bytes", "peak_low_bytes", "peak_high_bytes")), row["name"]
    return errors


def test_the_twentieth_set_reads_as_it_was_predicted() -> None:
    """The twentieth held-out set: nine prompts of two and three chunks, predicted before they were measured under the
    shipped profile (``predictions/heldout20.jsonl``) and with one graph cache for the generation
    (``heldout20-generation.jsonl``). Each reads 8 of 9 inside; each misses Phi-3-mini 4-bit at 4,096 (+21.2%
    shipped, -17.9% with the generation's cache): its second chunk peaks between kvsim's cold and warm plays. The
    generation's cache brings the dense second chunks onto their runs (Gemma-3-1B, Llama-3.2-3B: within 1%, from +15.1%
    and +11.0%) and puts the quantized ones 6-18% under theirs."""
    phi = [f"{H9}/phi-3-mini-4k-instruct-4bit.json"]
    errors = _read_as_predicted(20, {"": phi, "-generation": phi})
    for dense in ("gemma-3-1b-it", "llama-3.2-3b.json"):
        assert errors[""][dense] > 0.10 and abs(errors["-generation"][dense]) < 0.01


def test_the_twenty_first_set_reads_as_it_was_predicted() -> None:
    """The twenty-first held-out set: nine more prompts of two and three chunks, predicted before they were measured
    under the shipped profile and under the candidate the twentieth set and the stored runs suggested: the generation's
    graph cache with the host's allocations at 200 GB/s (``heldout21-generation.jsonl``). Each reads 8 of 9 inside.
    Shipped, Llama-3.2-3B 4-bit at 4,096 is out (+24.8%, its second chunk played warm); the candidate has it at -5.4%
    and misses SmolLM2-1.7B at 6,144 instead (-15.3%). Point median 5.8% shipped, 6.9% the candidate: no better, so
    the profile keeps its later chunks warm."""
    errors = _read_as_predicted(21, {"": [f"{P}/llama-3.2-3b-4bit.json"],
                                     "-generation": ["docs/tools/device/heldout8/smollm2-1.7b.json"]})
    assert errors[""]["llama-3.2-3b-4bit.json"] > 0.24 and abs(errors["-generation"]["llama-3.2-3b-4bit.json"]) < 0.06


def test_the_twenty_second_set_reads_as_it_was_predicted() -> None:
    """The twenty-second held-out set: seven prompts of two to four chunks, predicted before they were measured under
    the shipped profile and under candidate B (measured device and host times, ``docs/tools/timing_study/``;
    ``heldout22-b.jsonl``). Shipped, 6 of 7 inside: Llama-3.2-3B 4-bit at 6,144 is out (+21.9%, its later chunks
    played warm). Candidate B has all 7 inside, that one at -0.0%, every error within 5.7%."""
    errors = _read_as_predicted(22, {"": [f"{P}/llama-3.2-3b-4bit.json"], "-b": []})
    assert errors[""]["llama-3.2-3b-4bit.json"] > 0.21 and abs(errors["-b"]["llama-3.2-3b-4bit.json"]) < 0.001
    assert max(abs(e) for e in errors["-b"].values()) < 0.06


def test_candidate_bs_predictions_are_the_committed_scripts(tmp_path: Path) -> None:
    """``heldout22-b.jsonl`` is what ``docs/tools/timing_study/predict_b.py`` predicts: candidate B's fields through
    ``generation_runs.py predict --set``, one row remade as a user runs it."""
    out = tmp_path / "b.jsonl"
    subprocess.run([sys.executable, "docs/tools/timing_study/predict_b.py", "--configs", "qwen2.5-0.5b-instruct",
                    "--workloads", "8192:2048:16", "--backend", "mlx-cuda", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    made = json.loads(out.read_text())
    stored = [r for r in rows("predictions/heldout22-b.jsonl") if r["name"] == "qwen2.5-0.5b-instruct"][0]
    assert [made[k] for k in ("peak_bytes", "peak_low_bytes", "peak_high_bytes")] == \
        [stored[k] for k in ("peak_bytes", "peak_low_bytes", "peak_high_bytes")]
