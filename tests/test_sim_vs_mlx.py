"""The simulator against real MLX (CPU backend).

Every run's peak must lie in the predicted CPU range (``peak_low_bytes``..``peak_high_bytes``): the point is
the quiet host's peak, to a few bytes, and the range holds runs on a busy host, whose host thread stalls
while the worker frees in-flight inputs (``kvsim.sim.peak_range.load_range``, docs/validation.md). The final
active memory must be within 0.5%.
"""

from __future__ import annotations

import pytest

from kvsim.api import simulate
from kvsim.calibration.measure import run_reference
from kvsim.scenario.parse import parse_scenario

pytest.importorskip("mlx.core")

RATIO_LAYERS = [{"kv_heads": 1, "head_dim": 512, "dtype": "float16", "ratio": r} for r in [1, 1] + [4, 128] * 5]


def uniform(n: int, heads: int = 8, dim: int = 128, dtype: str = "float16") -> dict:
    return {"n_layers": n, "kv_heads": heads, "head_dim": dim, "dtype": dtype}


CASES = {
    "step-aligned-12": (uniform(12), {"name": "step"}, (1024, 512, 300, 1), "last_row"),
    "step-unaligned-b2": (uniform(6, 4, 64, "bfloat16"), {"name": "step"}, (700, 300, 300, 2), "last_row"),
    "step512-f32": (uniform(4, 2, 128, "float32"), {"name": "step", "step": 512}, (1500, 512, 600, 1), "last_row"),
    "prealloc": (uniform(8), {"name": "prealloc", "max_size": 2048}, (1000, 512, 300, 1), "last_row"),
    "geometric": (uniform(8), {"name": "geometric", "seed_rows": 256}, (1000, 512, 600, 1), "last_row"),
    "geometric-realloc": (
        uniform(8), {"name": "geometric", "seed_rows": 300, "factor": 1.5, "cap": 1500, "mechanism": "realloc"},
        (1000, 512, 400, 1), "last_row",
    ),
    "lowpeak": (uniform(8), {"name": "lowpeak"}, (1000, 512, 600, 1), "last_row"),
    "quantized": (uniform(12), {"name": "quantized", "bits": 4}, (600, 256, 300, 1), "last_row"),
    "ratio-per-layer": ({"layers": RATIO_LAYERS}, {"name": "step"}, (2048, 512, 300, 1), "last_row"),
    "sdpa": (uniform(4, 2, 64), {"name": "step"}, (600, 200, 100, 1), "sdpa"),
    # chunks longer than the window: attention reads the window's last rows plus the chunk, not all rows
    "rotating-sdpa": (uniform(2, 4, 64), {"name": "rotating", "max_size": 256}, (1795, 777, 40, 2), "sdpa"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_prediction_matches_real_mlx(name: str) -> None:
    model, policy, (prompt, chunk, decode, batch), consumer = CASES[name]
    scenario = parse_scenario({
        "id": name, "model": model, "policy": policy, "consumer": consumer,
        "workload": {"prompt_tokens": prompt, "prefill_chunk": chunk, "decode_tokens": decode, "batch": batch},
    })
    runs = [run_reference(scenario) for _ in range(3)]
    predicted = simulate(scenario).summary
    peaks = [m.peak_bytes for m in runs]
    assert predicted.peak_low_bytes < predicted.peak_bytes < predicted.peak_high_bytes
    assert all(predicted.peak_low_bytes <= p <= predicted.peak_high_bytes for p in peaks), (
        predicted.peak_low_bytes, predicted.peak_bytes, predicted.peak_high_bytes, peaks)
    for m in runs:
        assert predicted.final_active_bytes == pytest.approx(m.final_active_bytes, rel=0.005)
