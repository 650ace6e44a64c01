"""The CUDA profile's kernel rates are the H200 measurements they cite, and the trace times each kernel at its own.

``data/generation/mlx-cuda-0.32.4/kernels`` holds ``docs/tools/device/kernel_rates.py``'s runs; the profile
takes each rate as the extra arithmetic over the extra time between two sizes (what a per-call cost does not
reach), and the expert matmul of bf16 weights (``gather_mm``, mostly a per-call cost) as its mean rate at
2,048 tokens. ``docs/generation.md``, "CUDA: measured kernel rates".
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import mlx.core as mx
import pytest

from kvsim.core.paths import REPO_DATA_DIR
from kvsim.generation.schedule import generation_profile, trace_settings
from kvsim.sim.profile import load_profile

KERNELS = REPO_DATA_DIR / "generation" / "mlx-cuda-0.32.4" / "kernels"


def _rows() -> dict[str, dict]:
    rows = {}
    for name in ("rates-matmul-2048.json", "rates-matmul-4096.json", "rates-experts-1024.json",
                 "rates-experts-2048.json"):
        doc = json.loads((KERNELS / name).read_text(encoding="utf-8"))
        assert doc["mlx"] == "0.32.4"
        rows.update({r["case"]: r for r in doc["rows"]})
    return rows


def _marginal(rows: dict[str, dict], small: str, large: str) -> float:
    a, b = rows[small], rows[large]
    return (b["work"] - a["work"]) / (b["seconds"] - a["seconds"])


def test_cuda_kernel_rates_are_the_measured_ones() -> None:
    rows, p = _rows(), load_profile("mlx-cuda")
    four_bit = _marginal(rows, "gather_qmm 4-bit qwen3-30b-a3b 1024", "gather_qmm 4-bit qwen3-30b-a3b 2048")
    mxfp4 = _marginal(rows, "gather_qmm mxfp4 gpt-oss-20b 1024", "gather_qmm mxfp4 gpt-oss-20b 2048")
    expected = {
        "quantized_matmul_flops_per_s": _marginal(rows, "quantized_matmul 4-bit 2048x4096x14336",
                                                  "quantized_matmul 4-bit 4096x4096x14336"),
        "gather_qmm_flops_per_s": math.sqrt(four_bit * mxfp4),
        "gather_matmul_flops_per_s": rows["gather_mm bf16 deepseek-v2-lite 2048"]["rate_per_s"],
        "attention_flops_per_s": _marginal(rows, "sdpa h32/8 d128 q2048 k8192", "sdpa h32/8 d128 q2048 k32768"),
    }
    for field, rate in expected.items():
        assert getattr(p, field) == pytest.approx(rate, rel=0.005), field
    assert p.gather_qmm_flops_per_s < p.matmul_flops_per_s / 50  # expert kernels: two orders slower


def test_each_kernel_is_timed_at_its_own_rate() -> None:
    """An op's arithmetic in bytes at its kernel's rate, the whole model's bandwidth (``generation_profile``); timed
    here as their sum (``model_op_time`` "sum"; the shipped roofline takes the larger, tests/test_generation_measured_times.py)."""
    p = replace(load_profile("mlx-cuda"), model_op_time="sum")
    settings, bandwidth = trace_settings(p), generation_profile(p).device_bytes_per_s
    per_flop = dict(settings.kernel_bytes_per_flop)
    assert per_flop["gather_qmm"] == pytest.approx(bandwidth / p.gather_qmm_flops_per_s)
    assert settings.bytes_per_flop == pytest.approx(bandwidth / p.matmul_flops_per_s)
    x = mx.zeros((64, 128), mx.bfloat16)
    w = mx.zeros((256, 128), mx.bfloat16)
    q = mx.zeros((1, 4, 64, 32), mx.bfloat16)
    k = mx.zeros((1, 4, 96, 32), mx.bfloat16)
    with settings.tracing() as t:
        y = x @ w.T
        o = mx.fast.scaled_dot_product_attention(q, k, k, scale=0.1, mask="causal")
    g = t.graph
    mm, att = g.arrays[t.node_of[id(y)]], g.arrays[t.node_of[id(o)]]

    def arithmetic_bytes(a) -> int:  # beyond the bytes the op reads and writes (Trace.op)
        return a.work_bytes - a.nbytes - sum(g.arrays[i].nbytes for i in a.inputs)

    assert arithmetic_bytes(mm) == int(2 * 64 * 256 * 128 * settings.bytes_per_flop)
    pairs = 64 * 96 - 64 * 63 // 2  # causal: each query row sees the keys up to its own, aligned lower right
    assert att.prim == "ScaledDotProductAttention"
    assert arithmetic_bytes(att) == int(4 * 4 * pairs * 32 * per_flop["ScaledDotProductAttention"])


def test_cpu_traces_time_every_matmul_at_one_rate() -> None:
    settings = trace_settings(load_profile("mlx-cpu"))
    assert settings.kernel_bytes_per_flop == ()
