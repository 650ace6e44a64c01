"""Measured device and host times for whole-model CUDA graphs (``docs/generation.md``, "CUDA: the device's and the
host's times per command buffer, traced"; "CUDA: each phase's peak, and a host fitted per op class, switched on"): an
op's device time as a roofline (``model_op_time``), quantized matmuls per bits, and a process's later evals on a traced
host (``model_later_host``). Set as candidate B, they remake its held-out predictions value for value; candidate D (a
host per op class) is the shipped profile and remakes its own."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest
from cuda_runs import remade
from doc_tools import load_tool

from kvsim.generation.schedule import generation_profile
from kvsim.generation.trace import tracing
from kvsim.sim.allocator import Allocator
from kvsim.sim.eval_sim import Buffers, EvalState, run_eval
from kvsim.sim.graph import StepGraph
from kvsim.sim.profile import BackendProfile, load_profile, overlay_profile

ROOT = Path(__file__).resolve().parents[1]
def _fields(candidate: dict[str, str | float]) -> dict[str, object]:
    """A candidate's fields as its ``docs/tools/timing_study`` script passes them to ``--set`` (``"true"``/``"false"``
    for a flag), as ``BackendProfile`` values."""
    return {k: (v == "true") if v in ("true", "false") else v for k, v in candidate.items()}


predict_b = load_tool(Path("timing_study/predict_b.py"))
CANDIDATE_B = _fields(predict_b.B)
"""Candidate B's fields, as ``docs/tools/timing_study/predict_b.py`` sets them."""


def candidate_b() -> BackendProfile:
    return dataclasses.replace(load_profile("mlx-cuda"), **CANDIDATE_B)


@pytest.mark.parametrize("name", ["kvsim/data/configs/public/llama-3.2-3b-4bit.json", "gemma-2-2b-it"])
def test_the_fields_remake_candidate_bs_held_out_predictions(name: str) -> None:
    """``heldout22-b.jsonl`` was predicted by ``docs/tools/timing_study/predict_b.py``'s patches before the runs; kvsim
    with candidate B's fields predicts the same bytes (a quantized model's later chunks; a model whose attention MLX
    runs unfused)."""
    ours, stored = remade(name, "heldout22-b.jsonl", candidate_b())
    assert ours == stored


predict_d = load_tool(Path("timing_study/predict_d.py"))
CANDIDATE_D = _fields(predict_d.D)
"""Candidate D's fields, as ``docs/tools/timing_study/predict_d.py`` sets them (shipped 2026-12-03)."""
CANDIDATE_E = _fields(load_tool(Path("timing_study/predict_e.py")).E)
"""Candidate E's: D's with MLX's graph nodes (``model_mlx_nodes``; shipped since the twenty-fourth set)."""


def test_the_shipped_profile_is_candidate_e() -> None:
    """E's fields, its first eval's allocation rate a whole-model field: a KV-cache scenario keeps the KV fit's. E is D
    with each command buffer's nodes as MLX's encoder makes them; shipped, a first eval's range is centred on its point
    (``model_first_eval_low_share``, since the twenty-seventh set), where E's and D's put 0.375 of it below."""
    p = load_profile("mlx-cuda")
    for field, value in CANDIDATE_E.items():
        if field != "model_first_eval_low_share":
            assert getattr(p, "model_host_malloc_bytes_per_s" if field == "host_malloc_bytes_per_s" else field) == value
    assert CANDIDATE_E["model_first_eval_low_share"] == 0.0 and p.model_first_eval_low_share == 0.5
    assert {k for k in CANDIDATE_E if CANDIDATE_E[k] != CANDIDATE_D[k]} == {"model_mlx_nodes"}
    assert p.host_malloc_bytes_per_s == 1e11
    assert generation_profile(p).host_malloc_bytes_per_s == 4e11
    assert generation_profile(p.variant("low")).host_malloc_bytes_per_s == p.host_malloc_bytes_per_s_low


@pytest.mark.parametrize("name", ["gemma-3-1b-it", "kvsim/data/configs/public/qwen3-4b-5bit.json"])
def test_candidate_ds_fields_remake_its_held_out_predictions(name: str) -> None:
    """``heldout23-d.jsonl`` was predicted by ``predict_d.py`` before the runs; D's fields predict the same bytes (a
    small dense model's six chunks; a quantized one's three)."""
    ours, stored = remade(name, "heldout23-d.jsonl", dataclasses.replace(load_profile("mlx-cuda"), **CANDIDATE_D))
    assert ours == stored


def test_the_shipped_profile_remakes_candidate_es_held_out_prediction() -> None:
    """``heldout24-e.jsonl`` was predicted by ``predict_e.py`` before the runs; the shipped profile predicts the same
    bytes for Gemma-3-4B at 6K, the set's run where D and E differ most (D +19.1%, out; E +5.4%)."""
    ours, stored = remade("docs/tools/device/heldout9/gemma-3-4b-it.json", "heldout24-e.jsonl")
    assert ours == stored


@pytest.mark.parametrize(("roofline", "expect"), [(False, "sum"), (True, "max")])
def test_an_ops_device_time_is_the_larger_of_its_bytes_and_its_arithmetic(roofline: bool, expect: str) -> None:
    """A bf16 matmul of 64 x 128 by 128 x 256 writes 32 KiB (its inputs are untraced leaves, of no bytes); at 2 bytes
    a flop its arithmetic is 8 MiB."""
    a, b = mx.ones((64, 128), mx.bfloat16), mx.ones((128, 256), mx.bfloat16)
    with tracing("cuda", bytes_per_flop=2.0, roofline=roofline) as t:
        out = a @ b
    moved, arithmetic = 64 * 256 * 2, 2 * 64 * 256 * 128 * 2
    work = t.graph.arrays[t.node_of[id(out)]].work_bytes
    assert work == (moved + arithmetic if expect == "sum" else max(moved, arithmetic))


def test_a_quantized_matmul_is_timed_at_its_bits() -> None:
    """Per bits: a call's time and the arithmetic at that bits' rate; 3 bits at the 4-bit one's."""
    w = mx.ones((256, 512), mx.bfloat16)
    x = mx.ones((32, 512), mx.bfloat16)
    works = {}
    for bits in (3, 4, 8):
        q, scales, biases = mx.quantize(w, group_size=64, bits=bits)
        with tracing("cuda", 1.0, kernel_bytes_per_flop=[("quantized_matmul/4", 1.0), ("quantized_matmul/8", 0.5)],
                     kernel_call_bytes=[("quantized_matmul/4", 1000.0)], roofline=True) as t:
            out = mx.quantized_matmul(x, q, scales, biases, transpose=True, group_size=64, bits=bits)
        works[bits] = t.graph.arrays[t.node_of[id(out)]].work_bytes
    flops = 2 * 32 * 256 * 512
    assert works[4] == works[3] == flops + 1000 and works[8] == flops // 2


def test_later_evals_play_the_traced_host_and_the_range_spreads_it() -> None:
    p = candidate_b()
    later = p.later_evals()
    assert (later.host_node_s, later.host_kernel_s, later.host_malloc_bytes_per_s) == (0.0, 24e-6, 0.0)
    assert p.variant("low").later_evals().host_kernel_s == pytest.approx(30e-6)
    assert p.variant("high").later_evals().host_kernel_s == pytest.approx(19.2e-6)
    assert p.host_malloc_bytes_per_s == 4e11  # a process's first eval keeps its own host


def host_seconds(profile: BackendProfile, attention_calls: int) -> float:
    """The simulated seconds of one eval of ``attention_calls`` fused attentions and as many adds, on a device that
    takes no time (so the host's encoding is the eval's time)."""
    profile = dataclasses.replace(profile.floor_variant(), max_active_tasks=10**6, model_max_active_tasks=0)
    g, leaves, buffers = StepGraph(), {}, Buffers(Allocator(profile))
    for prim in ["ScaledDotProductAttention", "Add"] * attention_calls:
        a = g.leaf(1024, buffers.new(1024, 0.0, refs=1))
        leaves[a] = g.arrays[a].buffer_id
        g.outputs.append(g.op(prim, [a], 1024))
    return run_eval(g, leaves, buffers, profile, EvalState())[1]


def test_a_fused_attention_costs_the_later_host_its_cudnn_graph() -> None:
    """``model_later_host_sdpa_s``: each fused attention call costs a later eval's host that much more than another
    op (MLX adds cuDNN's graph to its own as a child: ``DnnGraph::encode_graph``); a first eval's host is its own."""
    p = dataclasses.replace(candidate_b(), model_later_host_node_s=9e-6, model_later_host_kernel_s=1e-6,
                            model_later_host_sdpa_s=300e-6)
    later = p.later_evals()
    assert (later.host_node_s, later.host_kernel_s, later.host_sdpa_s) == (9e-6, 1e-6, 300e-6)
    assert p.host_sdpa_s == 0.0 and p.variant("high").later_evals().host_sdpa_s == pytest.approx(240e-6)
    assert host_seconds(later, 3) - host_seconds(later, 1) == pytest.approx(2 * (300e-6 + 2 * 10e-6))


def test_a_profile_names_its_op_time_or_says_which_it_takes() -> None:
    with pytest.raises(ValueError, match="model_op_time.*'sum' or 'roofline', got 'rooflne'"):
        overlay_profile(load_profile("mlx-cuda"), {"model_op_time": "rooflne"}, "p.json")


def test_generation_runs_takes_a_true_or_false_field() -> None:
    out = subprocess.run([sys.executable, "docs/tools/generation_runs.py", "predict", "--configs", "qwen3-0.6b",
                          "--workloads", "1024:2048:4", "--backend", "mlx-cuda", "--out", "/dev/null",
                          "--set", "model_later_host=yes"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "model_later_host: 'yes' is not true or false" in out.stderr
