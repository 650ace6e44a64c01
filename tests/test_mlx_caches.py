"""kvsim's MLX caches against mlx-lm's own classes: contents, round trips, bad input, memory."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import pytest

mx = pytest.importorskip("mlx.core")
lm_cache = pytest.importorskip("mlx_lm.models.cache")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvsim.calibration.measure import kvsim_cache, reference_cache, run_reference  # noqa: E402
from kvsim.scenario.parse import parse_scenario  # noqa: E402
from policies.mlx import (  # noqa: E402
    FullKVCache,
    LowPeakKVCache,
    QuantizedPolicyKVCache,
    RotatingPolicyKVCache,
    StepKVCache,
    cache_for,
)

DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Policies whose returned rows must equal mlx-lm KVCache's (step 256) bit for bit.
PLAIN = [
    {"name": "step"},
    {"name": "lowpeak"},
    {"name": "prealloc", "max_size": 700},
    {"name": "geometric", "seed_rows": 48, "factor": 1.5},
    {"name": "geometric", "seed_rows": 64, "cap": 300},
    {"name": "geometric", "seed_rows": 64, "mechanism": "realloc"},
    {"name": "full", "context_tokens": 400},
    {"name": "full", "context_tokens": 400, "slack_rows": 2},
]


@contextmanager
def class_step(cls: type, step: int) -> Any:
    """Set an mlx-lm cache class's ``step`` attribute for the block."""
    old = cls.step
    cls.step = step
    try:
        yield
    finally:
        cls.step = old


def kv(rows: int, batch: int = 1, heads: int = 2, dim: int = 32, dtype: str = "float32", seed: int = 0) -> tuple[Any, Any]:
    key = mx.random.key(seed)
    k1, k2 = mx.random.split(key)
    shape = (batch, heads, rows, dim)
    return mx.random.normal(shape, key=k1).astype(DTYPES[dtype]), mx.random.normal(shape, key=k2).astype(DTYPES[dtype])


def same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if not isinstance(a, mx.array):  # the offset, keep, max_size ... of a state
        return a == b
    return a.shape == b.shape and a.dtype == b.dtype and bool(mx.array_equal(a, b))


ops = st.lists(
    st.one_of(
        st.tuples(st.just("update"), st.integers(1, 600)),
        st.tuples(st.just("update"), st.just(1)),
        st.tuples(st.just("trim"), st.integers(0, 300)),
    ),
    min_size=1,
    max_size=8,
)
shapes = st.fixed_dictionaries(
    {"batch": st.integers(1, 2), "heads": st.integers(1, 3), "dim": st.sampled_from([16, 32]), "dtype": st.sampled_from(list(DTYPES))}
)


def replay(caches: list[Any], steps: list[tuple[str, int]], shape: dict[str, Any]) -> None:
    """Feed identical updates/trims to every cache; assert identical outputs after each."""
    for i, (op, n) in enumerate(steps):
        if op == "trim":
            assert len({c.trim(n) for c in caches}) == 1
            continue
        keys, values = kv(n, seed=i, **shape)
        outs = [c.update_and_fetch(keys, values) for c in caches]
        for out in outs[1:]:
            assert same(out[0], outs[0][0]) and same(out[1], outs[0][1])
        assert len({c.offset for c in caches}) == 1


@FAST
@given(steps=ops, shape=shapes, policy=st.sampled_from(PLAIN))
def test_plain_policies_match_mlx_lm_kvcache(steps: list[tuple[str, int]], shape: dict[str, Any], policy: dict[str, Any]) -> None:
    replay([lm_cache.KVCache(), cache_for(policy)], steps, shape)


@FAST
@given(steps=ops, shape=shapes, step=st.sampled_from([16, 100, 256]))
def test_step_matches_kvcache_with_its_step(steps: list[tuple[str, int]], shape: dict[str, Any], step: int) -> None:
    with class_step(lm_cache.KVCache, step):
        replay([lm_cache.KVCache(), cache_for({"name": "step", "step": step})], steps, shape)
        ours = cache_for({"name": "step", "step": step})
        ref = lm_cache.KVCache()
        replay([ref, ours], [s for s in steps if s[0] == "update"], shape)
        assert ours.nbytes == ref.nbytes and ours.capacity_rows == (0 if ref.keys is None else ref.keys.shape[2])


@FAST
@given(
    chunks=st.lists(st.one_of(st.integers(1, 300), st.just(1)), min_size=1, max_size=10),
    shape=shapes,
    max_size=st.integers(8, 400),
    keep=st.integers(0, 4),
    step=st.sampled_from([16, 256]),
)
def test_rotating_matches_mlx_lm(chunks: list[int], shape: dict[str, Any], max_size: int, keep: int, step: int) -> None:
    with class_step(lm_cache.RotatingKVCache, step):
        ours = cache_for({"name": "rotating", "max_size": max_size, "keep": keep, "step": step})
        ref = lm_cache.RotatingKVCache(max_size=max_size, keep=keep)
        replay([ref, ours], [("update", n) for n in chunks], shape)
        for n in (1, 5):
            mine, theirs = ours.make_mask(n, window_size=4), ref.make_mask(n, window_size=4)
            assert same(mine, theirs) if isinstance(theirs, mx.array) else mine == theirs
        assert ours.size() == ref.size() and ours._idx == ref._idx


@FAST
@given(
    steps=ops,
    shape=st.fixed_dictionaries({"batch": st.integers(1, 2), "heads": st.integers(1, 2), "dim": st.just(64), "dtype": st.sampled_from(["float16", "bfloat16"])}),
    bits=st.sampled_from([4, 8]),
    group=st.sampled_from([32, 64]),
)
def test_quantized_matches_mlx_lm(steps: list[tuple[str, int]], shape: dict[str, Any], bits: int, group: int) -> None:
    ours = cache_for({"name": "quantized", "bits": bits, "group_size": group})
    replay([lm_cache.QuantizedKVCache(group_size=group, bits=bits), ours], steps, shape)
    assert (ours.bits, ours.group_size) == (bits, group)


ROUND_TRIP = [*PLAIN, {"name": "quantized"}, {"name": "rotating", "max_size": 300, "keep": 4}]


@pytest.mark.parametrize("policy", ROUND_TRIP, ids=lambda p: "-".join(map(str, p.values())))
def test_state_round_trip_then_continue(policy: dict[str, Any]) -> None:
    shape = {"batch": 1, "heads": 2, "dim": 64, "dtype": "float16"}
    a = cache_for(policy)
    for i, n in enumerate((300, 1, 1, 70)):
        a.update_and_fetch(*kv(n, seed=i, **shape))
    assert all(isinstance(x, str) for x in a.meta_state)
    b = type(a).from_state(a.state, a.meta_state)
    assert b.policy == a.policy and b.offset == a.offset and same(b.state, a.state)
    more = [("update", 1), ("update", 200), ("trim", 3), ("update", 1)]
    replay([a, b], [m for m in more if a.is_trimmable() or m[0] != "trim"], shape)


def test_trim_clamps_and_reports() -> None:
    c = StepKVCache()
    c.update_and_fetch(*kv(10))
    assert c.trim(4) == 4 and c.offset == 6
    assert c.trim(100) == 6 and c.offset == 0 and c.size() == 0
    keys, _ = c.update_and_fetch(*kv(3, seed=5))
    assert keys.shape[2] == 3 and same(keys, kv(3, seed=5)[0])


def test_cache_interface_basics() -> None:
    c = cache_for({"name": "lowpeak"})
    assert c.empty() and c.nbytes == 0 and c.is_trimmable()
    c.update_and_fetch(*kv(5, dim=16))
    assert not c.empty() and c.nbytes == 2 * 2 * 256 * 16 * 4 and c.make_mask(1) is None and c.make_mask(4) == "causal"


def one_line_error(fn: Any, match: str) -> str:
    with pytest.raises(ValueError, match=match) as info:
        fn()
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("policy", [{"name": "step"}, {"name": "lowpeak"}, {"name": "quantized"}, {"name": "rotating", "max_size": 64}])
def test_bad_updates_raise_one_line(policy: dict[str, Any]) -> None:
    c = cache_for(policy)
    k, v = kv(4, dim=64)
    one_line_error(lambda: c.update_and_fetch(k[0], v[0]), "keys: must be a 4-D")
    one_line_error(lambda: c.update_and_fetch(k, v[:, :, :2]), "values: shape")
    one_line_error(lambda: c.update_and_fetch(k[:, :, :0], v[:, :, :0]), "at least one row")
    c.update_and_fetch(k, v)
    k2, v2 = kv(3, heads=3, dim=64)
    one_line_error(lambda: c.update_and_fetch(k2, v2), "does not match the held")
    k3, v3 = kv(3, dim=128)
    one_line_error(lambda: c.update_and_fetch(k3, v3), "does not match the held")
    one_line_error(lambda: c.update_and_fetch(k.astype(mx.float16), v.astype(mx.float16)), r"keys\.dtype")
    one_line_error(lambda: c.trim(-1), "trim: n must be")
    assert c.offset == 4  # nothing was written by the rejected calls


def test_state_from_another_policy_is_rejected() -> None:
    step, quant, rot = StepKVCache(), cache_for({"name": "quantized"}), cache_for({"name": "rotating", "max_size": 32})
    for c in (step, quant, rot):
        c.update_and_fetch(*kv(8, dim=64))
    one_line_error(lambda: LowPeakKVCache.from_state(step.state, step.meta_state), "cannot load into a 'lowpeak'")
    one_line_error(lambda: StepKVCache.from_state(quant.state, ("step", "{}")), r"state: must be \(keys, values, offset\)")
    one_line_error(lambda: StepKVCache.from_state((*step.state[:2], 300)), r"state.offset: must be an integer in \[0, 256\]")
    one_line_error(lambda: QuantizedPolicyKVCache.from_state(step.state, quant.meta_state), "state: quantized needs")
    one_line_error(lambda: QuantizedPolicyKVCache.from_state((*quant.state[:3], 64, 4), quant.meta_state), "differ from the policy")
    one_line_error(lambda: RotatingPolicyKVCache.from_state(step.state, rot.meta_state), "state: rotating needs")
    one_line_error(lambda: RotatingPolicyKVCache.from_state((*rot.state[:4], 64, 8), rot.meta_state), "differ from the policy")
    one_line_error(lambda: StepKVCache.from_state(step.state, ("step", "{not json")), "bad 'step' policy fields")
    one_line_error(lambda: StepKVCache.from_state(step.state, 5), "meta_state: must start with")
    one_line_error(lambda: FullKVCache.from_state(step.state), "meta_state: a 'full' cache needs its policy")


def test_one_argument_from_state_as_mlx_lm_calls_it() -> None:
    """mlx-lm's loader calls ``from_state(state)``: parameterless policies and self-describing states load."""
    step, quant, rot = StepKVCache(), cache_for({"name": "quantized", "bits": 4}), cache_for({"name": "rotating", "max_size": 32, "keep": 2})
    for c in (step, quant, rot):
        c.update_and_fetch(*kv(40, dim=64))
    for c in (step, quant, rot):
        back = type(c).from_state(c.state)
        assert back.policy == c.policy and same(back.state, c.state)
    empty = StepKVCache.from_state(lm_cache.KVCache().state)
    assert empty.empty() and empty.offset == 0 and empty.state == (None, None, 0)


def test_wrapped_rotating_cache_refuses_trim() -> None:
    c = cache_for({"name": "rotating", "max_size": 8})
    for i in range(10):
        c.update_and_fetch(*kv(1, seed=i))
    one_line_error(lambda: c.trim(1), "cannot be trimmed")
    assert c.trim(0) == 0


@pytest.mark.parametrize(
    ("policy", "match"),
    [
        ({"name": "full"}, "policy.context_tokens: policy 'full' sizes"),
        ({"name": "geometric", "seed_rows": 8, "cap": "context"}, "policy.context_tokens"),
        ({"name": "paged"}, "has no MLX cache"),
        ({"name": "nope"}, "policy.name: unknown policy"),
        ({"name": "step", "step": 0}, "policy.step: must be >= 1"),
    ],
)
def test_cache_for_rejects_bad_policies(policy: dict[str, Any], match: str) -> None:
    one_line_error(lambda: cache_for(policy), match)


def test_cache_for_sizes_context_policies() -> None:
    c = cache_for({"name": "full"}, context_tokens=1000, ratio=4)
    c.update_and_fetch(*kv(3))
    assert c.capacity_rows == 250
    g = cache_for({"name": "geometric", "seed_rows": 64, "cap": "context"}, context_tokens=100)
    g.update_and_fetch(*kv(90))
    assert g.capacity_rows == 100


def reference_scenario(policy: dict[str, Any], layers: int = 32) -> Any:
    """The contract's reference model (32 x 8 x 128 bf16), sized to run in about a second on CPU."""
    return parse_scenario(
        {
            "id": "mem",
            "model": {"n_layers": layers, "kv_heads": 8, "head_dim": 128, "dtype": "bfloat16"},
            "policy": policy,
            "workload": {"prompt_tokens": 1000, "prefill_chunk": 512, "decode_tokens": 300},
        }
    )


def test_step_memory_matches_mlx_lm_kvcache() -> None:
    """A B B A runs; CPU frees lag behind dispatch, so compare the worse run of each."""
    runs = [run_reference(reference_scenario({"name": "step"}), f) for f in (reference_cache, kvsim_cache, kvsim_cache, reference_cache)]
    assert runs[0].cache_impl.endswith(".KVCache") and runs[1].cache_impl.endswith(".StepKVCache")
    ref_peak, our_peak = max(runs[0].peak_bytes, runs[3].peak_bytes), max(runs[1].peak_bytes, runs[2].peak_bytes)
    assert abs(our_peak - ref_peak) <= 0.01 * ref_peak
    for ours, ref in zip(runs[1].steps, runs[0].steps):  # held bytes after each step: equal to a few bytes
        assert abs(ours.active_bytes - ref.active_bytes) <= 1024


def test_lowpeak_peak_stays_near_steady() -> None:
    low = run_reference(reference_scenario({"name": "lowpeak"}), kvsim_cache)
    step = run_reference(reference_scenario({"name": "step"}), kvsim_cache)
    assert low.final_active_bytes == step.final_active_bytes  # same capacity arithmetic
    assert low.peak_bytes <= 1.05 * low.final_active_bytes
    assert step.peak_bytes > 1.2 * step.final_active_bytes  # the problem lowpeak removes


@pytest.mark.benchmark
def test_bench_policies_quick_smoke(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "docs" / "tools" / "bench_policies.py"
    done = subprocess.run([sys.executable, str(script), "--quick", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = tmp_path.glob("mlx-*-mlx*-*-quick.json")
    doc = json.loads(path.read_text())
    assert doc["mlx_version"] == mx.__version__ and doc["mlx_lm_version"] and doc["device_info"]["backend"]
    names = {(r["workload"], r["policy"]) for r in doc["rows"]}
    assert {"lowpeak", "step", "quantized", "mlx-lm KVCache"} <= {p for _, p in names}
    assert all(r["runs"] == 2 and r["peak_bytes"] > 0 and r["steady_bytes"] > 0 for r in doc["rows"])
    assert "lowpeak" in done.stdout and not list(tmp_path.glob("*.tmp"))


def test_state_setter_resets_shape_checks() -> None:
    c = StepKVCache()
    c.update_and_fetch(*kv(4, heads=2))
    c.state = kv(6, heads=3, seed=1)
    one_line_error(lambda: c.update_and_fetch(*kv(1, heads=2)), "does not match the held")
    assert c.update_and_fetch(*kv(1, heads=3))[0].shape == (1, 3, 7, 32)
