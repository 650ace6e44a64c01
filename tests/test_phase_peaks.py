"""Each phase's peak, measured and played (``kvsim.generation.measure.PhasePeak``, ``docs/tools/phase_peaks.py``;
``docs/generation.md``, "CUDA: each phase's peak, and a host fitted per op class, switched on"): the figures there,
read from ``repeat11.jsonl`` and kvsim's plays, and what the untraced chunks and the fused attention's probe show."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_runs import RUNS, profile_before_d, rows
from cupti_trace import device_times
from doc_tools import load_tool

from kvsim.sim.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
phase_peaks = load_tool(Path("phase_peaks.py"))


def _chunks(name: str, prompt_tokens: int, profile) -> list[tuple[float, float | None]]:
    """(real, kvsim's fitted play) above the weights, GB, per prompt chunk of the first such run."""
    row = next(r for r in rows("repeat11.jsonl") if r["name"].endswith(name) and r["prompt_tokens"] == prompt_tokens)
    return [(round(real, 2), None if ours["fit"] is None else round(ours["fit"], 2))
            for phase, _, real, ours in phase_peaks.phase_rows(row, profile) if phase == "prefill"]


@pytest.mark.parametrize(("name", "now", "before"), [
    ("mistral-7b-instruct-v0.3-6bit.json", [(3.82, 2.94), (3.51, 3.51)], [(3.82, 2.94), (3.51, 6.92)]),
    ("phi-3-mini-4k-instruct-4bit.json", [(7.06, 4.80), (6.18, 6.18)], [(7.06, 4.80), (6.18, 9.57)]),
    ("llama-3.2-3b-4bit.json", [(2.39, 2.39), (2.49, 2.49)], [(2.39, 2.39), (2.49, 3.84)]),
])
def test_quantized_misses_peak_in_their_first_chunk_and_d_plays_the_second(name, now, before) -> None:
    """Mistral-7B 6-bit and Phi-3-mini 4-bit at 4K peak in their first chunk, above kvsim's cold play of it; their second
    chunks, and Llama-3.2-3B 4-bit's, land on candidate D's warm plays to 10 MB, where the model before played them
    1.3-3.4 GB over."""
    assert _chunks(name, 4096, load_profile("mlx-cuda")) == now
    assert _chunks(name, 4096, profile_before_d()) == before


def test_small_dense_models_peak_in_a_warm_third_chunk() -> None:
    """SmolLM2-1.7B at 8K peaks in its third chunk (keys 4,096 to 6,144), which D plays to the 10 MB."""
    chunks = _chunks("smollm2-1.7b.json", 8192, load_profile("mlx-cuda"))
    assert max(chunks) == chunks[2] == (4.05, 4.05)


def test_gemma_3_4bs_third_chunk_peaks_shallow_where_d_plays_it_deep() -> None:
    """D's one dense miss left (Gemma-3-4B at 8K): the third chunk peaks highest but at 3.12-3.16 GB above the weights
    (``repeat12.jsonl``), where D plays it warm at 5.36; a cold trace of it instantiates 11 of its 17 graphs. With
    MLX's graph nodes (``model_mlx_nodes``, shipped since) kvsim instantiates those 11 and plays the chunk at 3.38."""
    runs = [r for r in rows("repeat12.jsonl") if r["name"].endswith("gemma-3-4b-it.json")]
    assert len(runs) == 2
    d = replace(load_profile("mlx-cuda"), model_mlx_nodes=False)
    for row in runs:
        chunks = [(round(real, 2), round(ours["fit"], 2)) for phase, _, real, ours in
                  phase_peaks.phase_rows(row, d) if phase == "prefill"]
        assert max(chunks) == chunks[2] and 3.1 < chunks[2][0] < 3.2 and chunks[2][1] == 5.36
        shipped = [round(ours["fit"], 2) for phase, _, _, ours in
                   phase_peaks.phase_rows(row, load_profile("mlx-cuda")) if phase == "prefill"]
        assert shipped[2] == 3.38
    cold = next(c for c in device_times.read_chunks(RUNS / "kernels" / "device-time-trace.tar.xz", "gemma4b")
                if c.run == 0 and c.offset == 4096)
    assert (cold.instantiations, cold.launches) == (11, 17)


def test_tracing_lowers_smollm2s_chunk_peaks() -> None:
    """Untraced, SmolLM2-1.7B's warm second chunk peaks 2.94 GB above the memory held before it; traced (CUPTI), 1.72."""
    plain = [json.loads(x) for x in (RUNS / "kernels" / "chunk-timing-plain.jsonl").read_text().splitlines()]
    smol = {(r["run"], r["offset"]): r["peak_above_bytes"] for r in plain if "smollm2" in r.get("name", "")}
    assert round(smol[1, 2048] / 1e9, 2) == 2.94 and round(smol[0, 4096] / 1e9, 2) == 2.89


def test_a_fused_attention_allocates_nothing_beside_its_output() -> None:
    probes = [json.loads(x) for x in (RUNS / "kernels" / "sdpa-workspace.jsonl").read_text().splitlines()]
    assert len(probes) == 20 and max(p["extra_bytes"] for p in probes) <= 8448


def test_a_missing_file_is_one_line_and_exit_2() -> None:
    out = subprocess.run([sys.executable, "docs/tools/phase_peaks.py", "no-such.jsonl"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.strip() == "phase_peaks: 'no-such.jsonl' not found"
