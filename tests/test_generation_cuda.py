"""kvsim generate's CUDA point and range against the lead's real H200 generations (MLX 0.32.4, mlx-lm 0.32.2).

One shipped run per split is predicted (full-size models take seconds each): each must fall inside its
predicted range, the range at most 1.35x wide (issue #17), and the point within the largest error
``docs/generation.md`` reports for the split's runs. The eleventh set's 6-bit Llama-3.2-3B is a first eval that the
floor-anchored range missed and the range placed on its point holds.
"""

from __future__ import annotations

import json

import pytest

from kvsim.core.paths import REPO_DATA_DIR
from kvsim.generation.config import ModelConfig
from kvsim.generation.measure import row_workload
from kvsim.generation.model import build_model
from kvsim.generation.predict import predict

RUNS = REPO_DATA_DIR / "generation" / "mlx-cuda-0.32.4"
SAMPLE = [("train", "gemma-3-1b-it", 8192, 0.124), ("validation", "llama-3.1-8b-instruct", 1024, 0.043),
          ("heldout", "lfm2-1.2b", 1024, 0.084), ("heldout3", "gemma-2-2b-it", 1024, 0.059),
          ("heldout4", "olmo-2-0425-1b", 1024, 0.132),
          ("heldout5", "docs/tools/device/llama-3.2-1b-instruct-float32.json", 8192, 0.044),
          ("heldout6", "pythia-160m", 8192, 0.207), ("heldout6", "llama-3.2-1b-instruct", 1024, 0.207),
          ("heldout11", "docs/tools/device/heldout11/llama-3.2-3b-6bit.json", 1024, 0.066)]
"""(split, config, prompt tokens, largest |point error| of the split under candidate D, shipped since 2026-12-03:
``docs/tools/timing_study/xcand.py`` over the stored runs, docs/generation.md, "CUDA: each phase's peak, and a host
fitted per op class, switched on")."""


def _run(split: str, name: str, prompt_tokens: int) -> dict:
    rows = [json.loads(line) for line in (RUNS / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]
    return next(r for r in rows if r["name"] == name and r["prompt_tokens"] == prompt_tokens)


@pytest.mark.parametrize(("split", "name", "prompt_tokens", "max_error"), SAMPLE)
def test_cuda_run_inside_its_range_and_near_the_point(split: str, name: str, prompt_tokens: int, max_error: float):
    r = _run(split, name, prompt_tokens)
    built = build_model(ModelConfig(r["config"], r["name"]))
    w = row_workload(r)
    p = predict(built, w, "mlx-cuda")
    assert p.weights_bytes == r["params_bytes"] and p.kv_bytes == r["kv_bytes"]
    assert p.peak_low_bytes is not None and p.peak_high_bytes is not None
    assert p.peak_low_bytes <= r["peak_bytes"] <= p.peak_high_bytes
    assert p.peak_high_bytes / p.peak_low_bytes <= 1.35
    assert abs(p.peak_bytes / r["peak_bytes"] - 1) <= max_error
