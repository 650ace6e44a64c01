"""Provisioned-footprint arithmetic: ds4 PR #1010's figures from the preset, real mlx-lm
caches as the reference for MLX layouts, and monotonicity properties."""

from __future__ import annotations

import mlx.core as mx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx_lm.models.cache import KVCache, RotatingKVCache

from kvsim.scenario.footprint import (
    chunk_tokens,
    full_bytes_per_token,
    growth_events,
    layer_capacity_rows,
    provisioned_bytes,
    provisioned_bytes_for_steps,
    window_bytes,
)
from kvsim.scenario.layer import layer_policy
from kvsim.scenario.parse import Workload
from kvsim.scenario.presets import load_preset
from kvsim.scenario.spec import LayerSpec, ModelSpec
from policies.parse import policy_from_dict

MIB = 1 << 20
CTX_256K = 262_144
DS4 = load_preset("deepseek-v4-flash")
# ds4 main: comp_cap = ctx / ratio + 2 allocated up front; PR #1010: 4096 rows, x2, capped at comp_cap.
DS4_MAIN = {"name": "full", "slack_rows": 2}
DS4_PR = {"name": "geometric", "seed_rows": 4096, "factor": 2, "cap": "context", "slack_rows": 2}


def ds4_bytes(policy: dict, tokens: int, context: int, **kw) -> int:
    return provisioned_bytes(DS4, policy, tokens, context_tokens=context, kv_buffers=1, **kw)


def test_ds4_main_provisions_2_01_gib_at_256k():
    total = ds4_bytes(DS4_MAIN, 2048, CTX_256K)
    assert total == 2_155_977_728
    assert round(total / (1 << 30), 2) == 2.01
    indexer = 21 * (CTX_256K // 4 + 2) * 512
    assert ds4_bytes(DS4_MAIN, 2048, CTX_256K, include_extra=False) == total - indexer


def test_ds4_pr_1010_initial_allocation_and_saving_for_a_2048_token_conversation():
    workload = Workload(prompt_tokens=1024, prefill_chunk=512, decode_tokens=1024)
    steps = workload.step_tokens()
    eager = provisioned_bytes_for_steps(DS4, DS4_MAIN, steps, context_tokens=CTX_256K, kv_buffers=1)
    lazy = provisioned_bytes_for_steps(DS4, DS4_PR, steps, context_tokens=CTX_256K, kv_buffers=1)
    assert lazy == 174_104_576 == ds4_bytes(DS4_PR, 2048, CTX_256K)
    saved = eager - lazy
    assert saved == 1_981_873_152
    assert saved / MIB == pytest.approx(1890.06, abs=0.005)
    assert abs(saved / MIB - 1891) / 1891 < 0.001  # the PR's measured phys_footprint delta, in MiB
    assert round(1891 / 7129, 3) == 0.265  # "1891 MB (26.5%) saved"


def test_ds4_x2_grow_schedule_at_256k():
    r4 = next(lay for lay in DS4.layers if lay.ratio == 4)
    policy = layer_policy(DS4_PR, r4, CTX_256K)
    events = growth_events(policy, r4, [4] * (CTX_256K // 4))  # one row per step
    assert [cap for _, cap in events] == [4096, 8192, 16384, 32768, 65536]
    held_before = [r4.rows_after(tokens) - 1 for tokens, _ in events[1:]]
    assert held_before == [4096, 8192, 16384, 32768]  # 4 grows, each when the buffer is full
    assert events[-1][1] < CTX_256K // 4 + 2  # the 65,538-row cap is never needed
    r128 = next(lay for lay in DS4.layers if lay.ratio == 128)
    assert growth_events(layer_policy(DS4_PR, r128, CTX_256K), r128, [4096] * 64) == [(4096, 2050)]


def test_ds4_one_million_tokens():
    one_m = 1 << 20
    assert ds4_bytes(DS4_MAIN, one_m, one_m) == 8_623_594_496
    r128 = next(lay for lay in DS4.layers if lay.ratio == 128)
    events = growth_events(layer_policy(DS4_PR, r128, one_m), r128, [128] * (one_m // 128))
    assert [cap for _, cap in events] == [4096, 8192]
    assert events[1][0] == 4097 * 128  # the one ratio-128 grow, at about 524k tokens


@pytest.mark.parametrize(
    ("context", "full_mib", "initial_mib"),
    [
        (16_384, 128.6, 128.5),
        (32_768, 257.1, 131.0),
        (65_536, 514.1, 136.0),
        (100_000, 784.4, 141.3),
        (131_072, 1028.1, 146.0),
        (262_144, 2056.1, 166.0),
        (524_288, 4112.1, 206.0),
        (1_048_576, 8224.1, 206.0),
    ],
)
def test_ds4_reference_table(context, full_mib, initial_mib):
    """shared/reference/ds4-kv-layout.md section 4 reference table (MiB to 0.1)."""
    assert ds4_bytes(DS4_MAIN, 2048, context) / MIB == pytest.approx(full_mib, abs=0.05)
    assert ds4_bytes(DS4_PR, 2048, context) / MIB == pytest.approx(initial_mib, abs=0.05)


def test_ds4_bytes_per_token():
    assert full_bytes_per_token(DS4, kv_buffers=1) == 8224  # Metal F16 latent + F32 indexer
    f32 = ModelSpec("ds4-cpu", tuple(LayerSpec(**{**_fields(x), "dtype": "float32"}) for x in DS4.layers))
    assert full_bytes_per_token(f32, kv_buffers=1) == 13_760  # CPU reference cache


def _fields(layer: LayerSpec) -> dict:
    return {k: getattr(layer, k) for k in ("kv_heads", "head_dim", "dtype", "ratio", "window_rows", "extra_row_bytes")}


def _real_mlx_lm_bytes(model: ModelSpec, steps: list[int], step: int) -> int:
    """Feed the contract's rows to mlx-lm's own caches (make_cache's choice per layer)."""
    stepped = type("SteppedKVCache", (KVCache,), {"step": step})
    dtypes = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}
    caches = [RotatingKVCache(max_size=x.window_rows) if x.window_rows else stepped() for x in model.layers]
    start = 0
    for n in steps:
        for layer, cache in zip(model.layers, caches):
            rows = layer.rows_in_step(start, n)
            if rows:
                x = mx.zeros((1, layer.kv_heads, rows, layer.head_dim), dtype=dtypes[layer.dtype])
                cache.update_and_fetch(x, x)
        start += n
    return sum(c.keys.nbytes + c.values.nbytes for c in caches if c.keys is not None)


@pytest.mark.parametrize(
    ("preset", "workload", "step"),
    [
        ("gpt-oss-20b", Workload(prompt_tokens=600, prefill_chunk=256, decode_tokens=5), 256),
        ("gpt-oss-20b", Workload(prompt_tokens=100, prefill_chunk=64, decode_tokens=40), 32),
        ("gemma-3-27b", Workload(prompt_tokens=1500, prefill_chunk=512, decode_tokens=3), 256),
        ("deepseek-v4-flash", Workload(prompt_tokens=3000, prefill_chunk=1024, decode_tokens=9), 256),
        ("qwen3.5-122b-a10b", Workload(prompt_tokens=700, prefill_chunk=512, decode_tokens=2), 128),
    ],
)
def test_provisioned_bytes_match_real_mlx_lm_caches(preset, workload, step):
    model = load_preset(preset)
    steps = workload.step_tokens()
    # mlx-lm's KVCache holds K and V whatever the model's native layout (ds4's latent), and no companion rows
    predicted = provisioned_bytes_for_steps(model, {"name": "step", "step": step}, steps, kv_buffers=2,
                                            include_extra=False)
    assert predicted == _real_mlx_lm_bytes(model, steps, step)


def test_window_layers_hold_the_window_after_decode():
    gpt = load_preset("gpt-oss-20b")
    steps = Workload(prompt_tokens=32_768, prefill_chunk=2048, decode_tokens=1).step_tokens()
    full_rows = 32_768 + 256  # aligned prefill, then one more 256-row step for the decode token
    expect = 12 * 2 * 8 * 64 * 2 * full_rows + window_bytes(gpt)
    assert provisioned_bytes_for_steps(gpt, {"name": "step"}, steps) == expect
    assert window_bytes(gpt) == 3 * MIB
    assert window_bytes(load_preset("gemma-3-27b")) == 416 * MIB


def test_batch_and_buffers_scale_linearly_and_bad_arguments_fail():
    llama = load_preset("llama-3.1-8b")
    one = provisioned_bytes(llama, {"name": "step"}, 1000, step_tokens=512)
    assert one == 32 * 2 * 8 * 128 * 2 * 1024
    assert provisioned_bytes(llama, {"name": "step"}, 1000, step_tokens=512, batch=4) == 4 * one
    assert provisioned_bytes(llama, {"name": "step"}, 1000, step_tokens=512, kv_buffers=1) == one // 2
    for kwargs in ({"kv_buffers": 3}, {"batch": 0}, {"step_tokens": 0}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            provisioned_bytes(llama, {"name": "step"}, 1000, **kwargs)
    assert chunk_tokens(1000, 512) == [512, 488] and chunk_tokens(0) == []


def test_quantized_rows_cost_packed_data_scales_and_biases():
    llama = load_preset("llama-3.1-8b")
    per_layer_row = 8 * (128 * 4 // 32) * 4 + 2 * 8 * (128 // 64) * 2  # 4-bit data + scales + biases
    assert provisioned_bytes(llama, {"name": "quantized", "bits": 4}, 256) == 32 * 2 * 256 * per_layer_row


# ---- properties ----------------------------------------------------------------------

layers = st.builds(
    LayerSpec,
    kv_heads=st.integers(1, 8),
    head_dim=st.sampled_from([64, 128]),
    dtype=st.sampled_from(["float16", "bfloat16", "float32"]),
    ratio=st.sampled_from([1, 2, 4, 128]),
    extra_row_bytes=st.sampled_from([0, 512]),
)
models = st.lists(layers, min_size=1, max_size=4).map(lambda xs: ModelSpec("prop", tuple(xs)))
policies = st.sampled_from(
    [
        {"name": "step", "step": 256},
        {"name": "step", "step": 1},
        {"name": "prealloc", "max_size": 1000},
        {"name": "geometric", "seed_rows": 64, "factor": 1.5},
        {"name": "geometric", "seed_rows": 4096, "cap": "context", "slack_rows": 2},
        {"name": "full", "slack_rows": 2},
        {"name": "paged", "block_rows": 16},
        {"name": "quantized", "bits": 4},
        {"name": "lowpeak"},
    ]
)


@settings(max_examples=60, deadline=None)
@given(models, policies, st.integers(0, 20_000), st.integers(0, 20_000), st.sampled_from([None, 1, 512, 4096]))
def test_more_tokens_never_shrink_the_footprint(model, policy, a, b, chunk):
    lo, hi = sorted((a, b))
    context = 40_000
    small = provisioned_bytes(model, policy, lo, step_tokens=chunk, context_tokens=context)
    large = provisioned_bytes(model, policy, hi, step_tokens=chunk, context_tokens=context)
    assert small <= large


@settings(max_examples=60, deadline=None)
@given(layers, policies, st.lists(st.integers(1, 3000), min_size=1, max_size=25))
def test_capacity_covers_rows_and_grows_monotonically(layer, policy_dict, steps):
    policy = policy_from_dict(policy_dict, ratio=layer.ratio, context_tokens=sum(steps))
    events = growth_events(policy, layer, steps)
    caps = [cap for _, cap in events]
    assert caps == sorted(caps)
    assert layer_capacity_rows(policy, layer, steps) >= layer.rows_after(sum(steps))
    for k in range(1, len(steps) + 1):  # every prefix holds the rows it received
        assert layer_capacity_rows(policy, layer, steps[:k]) >= layer.rows_after(sum(steps[:k]))


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 2048), st.lists(st.integers(1, 3000), min_size=1, max_size=25))
def test_window_layers_stay_within_window_plus_one_chunk(window, steps):
    layer = LayerSpec(kv_heads=1, head_dim=64, window_rows=window)
    rows = layer_capacity_rows(layer_policy({"name": "step"}, layer, sum(steps)), layer, steps)
    assert min(sum(steps), window) <= rows <= max(window, window - 1 + steps[-1])
