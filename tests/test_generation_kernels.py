"""Metal's gated-delta kernel is played as the one node it is, not as the CPU host's per-token loop."""

from __future__ import annotations

import mlx.core as mx
import mlx_lm.models.gated_delta as gd

from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.kernels import gated_delta_standin
from kvsim.generation.measure import scale_config
from kvsim.generation.model import build_model
from kvsim.generation.schedule import Workload, play_generation
from kvsim.generation.trace import tracing
from kvsim.sim.profile import load_profile


def _inputs(steps: int, dk: int = 64) -> tuple[mx.array, ...]:
    b, hk, hv, dv = 1, 2, 4, 32
    q = mx.random.normal((b, steps, hk, dk)).astype(mx.bfloat16)
    k = mx.random.normal((b, steps, hk, dk)).astype(mx.bfloat16)
    v = mx.random.normal((b, steps, hv, dv)).astype(mx.bfloat16)
    g = mx.random.uniform(shape=(b, steps, hv))
    beta = mx.random.uniform(shape=(b, steps, hv))
    state = mx.zeros((b, hv, dv, dk), mx.float32)
    return q, k, v, g, beta, state


def test_the_standin_has_the_outputs_of_mlx_lm_own_recurrence() -> None:
    """Shapes and dtypes of ``y`` and the new state are those ``gated_delta_ops`` computes, and the
    trace holds one ``GatedDeltaKernel`` node per output instead of a loop over the 16 tokens."""
    args = _inputs(16)
    y_ref, s_ref = gd.gated_delta_ops(*args)
    with tracing() as t:
        y, s = gated_delta_standin(t, gd.gated_delta_ops)(*args)
    assert (y.shape, y.dtype, s.shape, s.dtype) == (y_ref.shape, y_ref.dtype, s_ref.shape, s_ref.dtype)
    prims = [a.prim for a in t.graph.arrays if a.prim]
    assert prims == ["GatedDeltaKernel", "GatedDeltaKernel"]


def test_a_head_dim_the_kernel_refuses_keeps_the_loop() -> None:
    """``gated_delta_update`` runs the ops when ``k.shape[-1]`` is not a multiple of 32."""
    with tracing() as t:
        gated_delta_standin(t, gd.gated_delta_ops)(*_inputs(4, dk=48))
    assert "GatedDeltaKernel" not in {a.prim for a in t.graph.arrays}


def test_metal_play_of_a_gated_delta_model_holds_no_per_token_state() -> None:
    """A 4-layer Qwen3-Next with its real DeltaNet head dims: on the CPU profile the loop's float32 state per token makes the prefill
    transient grow by at least one state per added token; on Metal the kernel keeps one state per layer."""
    config = scale_config(load_model_config("qwen3-next-80b-a3b-instruct").config, 4, hidden_size=256,
                          intermediate_size=768, vocab_size=8192, linear_num_value_heads=16,
                          linear_key_head_dim=128, linear_value_head_dim=128)  # the real state: 1 MiB a head group
    built = build_model(ModelConfig(config, "qwen3-next-small"))
    layer = built.model.layers[0].linear_attn
    state_bytes = layer.num_v_heads * layer.head_v_dim * layer.head_k_dim * 4

    def transient(backend: str, tokens: int) -> int:
        evals, _ = play_generation(built, Workload(tokens, 2, prefill_step_size=tokens), load_profile(backend))
        return max(e.peak_bytes for e in evals) - built.weights_bytes

    cpu_growth = transient("mlx-cpu", 512) - transient("mlx-cpu", 256)
    metal = {n: transient("mlx-metal", n) for n in (256, 512)}
    assert cpu_growth >= 256 * state_bytes
    assert metal[512] - metal[256] < 256 * state_bytes < cpu_growth
