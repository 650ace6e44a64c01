"""Properties of every growth policy and the policy parser, checked against mlx-lm's rules."""

from __future__ import annotations

import json
import math

import mlx.core as mx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlx_lm.models.cache import KVCache, RotatingKVCache

from policies.growth import (
    FullPolicy,
    GeometricPolicy,
    LowPeakPolicy,
    Mechanism,
    PagedPolicy,
    PreallocPolicy,
    QuantizedPolicy,
    RotatingPolicy,
    StepPolicy,
)
from policies.parse import POLICY_NAMES, PolicyError, policy_from_dict

rows_steps = st.lists(st.integers(1, 700), min_size=1, max_size=30)
step_rows = st.integers(1, 512)


def mlx_lm_kvcache_capacity(shape: int, prev: int, num_steps: int, step: int) -> int:
    """mlx-lm ``KVCache.update_and_fetch`` (cache.py), transcribed to buffer rows only."""
    if shape == 0 or (prev + num_steps) > shape:
        n_steps = (step + num_steps - 1) // step
        new_rows = n_steps * step
        if shape:
            if prev % step != 0:
                shape = prev
            return shape + new_rows
        return new_rows
    return shape


def replay(policy, steps):
    """Capacity and the Growth (or None) after each step, feeding rows ``steps``."""
    capacity = held = 0
    out = []
    for add in steps:
        grown = policy.grow(capacity, held, add)
        out.append((capacity, held, add, grown))
        held += add
        if grown is not None:
            capacity = grown.capacity_rows
    return out


non_rotating = st.one_of(
    step_rows.map(StepPolicy),
    st.builds(PreallocPolicy, st.integers(1, 5000), step_rows),
    st.builds(
        GeometricPolicy,
        st.integers(1, 4096),
        st.sampled_from([1.25, 1.5, 2.0, 3.0]),
        st.one_of(st.none(), st.integers(4096, 100_000)),
        st.sampled_from([Mechanism.CONCAT, Mechanism.REALLOC]),
    ),
    st.integers(1, 20_000).map(FullPolicy),
    st.integers(1, 64).map(PagedPolicy),
    st.builds(QuantizedPolicy, step_rows, st.sampled_from([2, 4, 8]), st.sampled_from([32, 64, 128])),
    step_rows.map(LowPeakPolicy),
)


@given(non_rotating, rows_steps)
def test_capacity_holds_every_row_and_never_loses_live_rows(policy, steps):
    for capacity, held, add, grown in replay(policy, steps):
        if grown is None:
            assert 0 < held + add <= capacity
            continue
        assert grown.capacity_rows >= held + add
        assert grown.extension_rows == grown.capacity_rows - grown.kept_rows
        if capacity == 0:
            assert grown.mechanism is Mechanism.FRESH and grown.kept_rows == 0
        else:
            assert grown.mechanism is not Mechanism.FRESH
            assert held <= grown.kept_rows <= capacity  # the live prefix is carried over
            assert grown.capacity_rows > capacity


@given(step_rows, rows_steps)
def test_step_capacity_is_mlx_lm_kvcache_rule(step, steps):
    shape = prev = 0
    for policy in (StepPolicy(step), LowPeakPolicy(step), QuantizedPolicy(step)):
        shape = prev = 0
        for capacity, _held, add, grown in replay(policy, steps):
            shape = mlx_lm_kvcache_capacity(shape, prev, add, step)
            prev += add
            assert (capacity if grown is None else grown.capacity_rows) == shape


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 300), st.lists(st.integers(1, 400), min_size=1, max_size=8))
def test_step_policy_matches_real_mlx_lm_kvcache(step, steps):
    cache = type("SteppedKVCache", (KVCache,), {"step": step})()
    capacity = held = 0
    for add in steps:
        x = mx.zeros((1, 1, add, 4), dtype=mx.float16)
        cache.update_and_fetch(x, x)
        grown = StepPolicy(step).grow(capacity, held, add)
        held += add
        capacity = capacity if grown is None else grown.capacity_rows
        assert cache.keys.shape[2] == capacity


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(2, 300),
    st.integers(0, 3),
    st.lists(st.one_of(st.just(1), st.integers(1, 400)), min_size=1, max_size=12),
)
def test_rotating_policy_matches_real_mlx_lm_rotating_cache(max_size, keep, steps):
    keep = min(keep, max_size - 1)
    cache = RotatingKVCache(max_size=max_size, keep=keep)
    policy = RotatingPolicy(max_size, keep)
    capacity = held = 0
    for add in steps:
        x = mx.zeros((1, 1, add, 4), dtype=mx.float16)
        cache.update_and_fetch(x, x)
        grown = policy.grow(capacity, held, add)
        held += add
        capacity = capacity if grown is None else grown.capacity_rows
        if grown is None and add == 1 and capacity > max_size:
            capacity = max_size  # the in-place trim the caller applies (RotatingPolicy.grow only grows)
        assert cache.keys.shape[2] == capacity


@given(st.integers(1, 4096), st.sampled_from([1.5, 2.0, 4.0]), st.one_of(st.none(), st.integers(1, 50_000)), rows_steps)
def test_geometric_never_exceeds_cap_or_need(seed, factor, cap, steps):
    if cap is not None:
        cap = max(cap, seed)
    policy = GeometricPolicy(seed, factor, cap)
    for capacity, held, add, grown in replay(policy, steps):
        if grown is None:
            continue
        need = held + add
        if cap is not None:
            assert grown.capacity_rows <= max(cap, need)
        start = seed if capacity == 0 else capacity
        assert grown.capacity_rows <= max(math.ceil(max(start, need) * factor) + 1, need)
        if capacity == 0 and (cap is None or need <= cap):
            assert grown.capacity_rows >= min(seed, cap or seed)


@given(st.integers(1, 5000), st.lists(st.integers(1, 700), min_size=2, max_size=20))
def test_prealloc_first_is_max_size_then_step_256(max_size, steps):
    events = replay(PreallocPolicy(max_size), steps)
    assert events[0][3].capacity_rows == max(max_size, steps[0])
    shape, prev = events[0][3].capacity_rows, steps[0]
    for capacity, _held, add, grown in events[1:]:
        shape = mlx_lm_kvcache_capacity(shape, prev, add, 256)
        prev += add
        assert (capacity if grown is None else grown.capacity_rows) == shape


@given(st.integers(1, 64), rows_steps)
def test_paged_capacity_is_whole_blocks_without_copies(block, steps):
    for _capacity, held, add, grown in replay(PagedPolicy(block), steps):
        if grown is not None:
            assert grown.capacity_rows % block == 0
            assert grown.capacity_rows - block < held + add
            assert grown.mechanism in (Mechanism.FRESH, Mechanism.IN_PLACE)


@given(st.integers(1, 20_000), rows_steps)
def test_full_allocates_the_context_once(context_rows, steps):
    events = [g for *_, g in replay(FullPolicy(context_rows), steps) if g is not None]
    assert events[0].capacity_rows == max(context_rows, steps[0])
    if sum(steps) <= max(context_rows, steps[0]):
        assert len(events) == 1


# ---- parser -------------------------------------------------------------------------

VALID = {
    "step": {"name": "step", "step": 256},
    "prealloc": {"name": "prealloc", "max_size": 4096, "step": 128},
    "geometric": {"name": "geometric", "seed_rows": 4096, "factor": 2, "cap": 65538, "mechanism": "realloc"},
    "full": {"name": "full", "context_tokens": 262144, "slack_rows": 2},
    "paged": {"name": "paged", "block_rows": 16},
    "rotating": {"name": "rotating", "max_size": 128, "keep": 4, "step": 256},
    "quantized": {"name": "quantized", "step": 256, "bits": 4, "group_size": 64},
    "lowpeak": {"name": "lowpeak", "step": 256},
}
# Integer row fields and their lower bound.
INT_FIELDS = {
    "step": {"step": 1},
    "prealloc": {"max_size": 1, "step": 1},
    "geometric": {"seed_rows": 1, "cap": 1, "context_tokens": 1, "slack_rows": 0},
    "full": {"context_tokens": 1, "slack_rows": 0},
    "paged": {"block_rows": 1},
    "rotating": {"max_size": 1, "keep": 0, "step": 1},
    "quantized": {"step": 1},
    "lowpeak": {"step": 1},
}
bad_values = st.one_of(
    st.integers(max_value=-1),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=8).filter(lambda s: s != "context"),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(1 << 40),
)


def assert_one_line(err: PolicyError, field: str) -> None:
    assert err.field == field
    message = str(err)
    assert "\n" not in message and message.startswith(f"{field}: ")


def test_every_name_has_a_valid_example_that_round_trips_json():
    assert set(VALID) == set(POLICY_NAMES)
    for name, obj in VALID.items():
        assert policy_from_dict(json.loads(json.dumps(obj))).name == name


@given(st.sampled_from(sorted(INT_FIELDS)), st.data())
def test_bad_integer_fields_name_the_field(name, data):
    field = data.draw(st.sampled_from(sorted(INT_FIELDS[name])))
    value = data.draw(bad_values if INT_FIELDS[name][field] == 0 else st.one_of(bad_values, st.just(0)))
    if field == "cap" and value is None:
        return
    obj = {**VALID[name], field: value}
    with pytest.raises(PolicyError) as info:
        policy_from_dict(obj)
    assert_one_line(info.value, f"policy.{field}")


@given(st.sampled_from(["ratio", "context_tokens"]), st.one_of(bad_values, st.just(0)))
def test_bad_layer_arguments_name_the_argument(argument, value):
    """``ratio`` and ``context_tokens`` come from the caller (``cache_for``), not the JSON; checked alike."""
    with pytest.raises(PolicyError) as info:
        policy_from_dict(VALID["full"], **{"context_tokens": 1000, argument: value})
    assert_one_line(info.value, f"layer.{argument}")


@given(st.one_of(st.floats(max_value=1.0), st.floats(min_value=16.0001), st.booleans(), st.text(max_size=4), st.none()))
def test_bad_factor_names_factor(value):
    with pytest.raises(PolicyError) as info:
        policy_from_dict({"name": "geometric", "seed_rows": 8, "factor": value})
    assert_one_line(info.value, "policy.factor")


@given(st.integers(1, 10_000), st.integers(1, 10_000))
def test_cap_below_seed_names_cap(seed, cap):
    obj = {"name": "geometric", "seed_rows": seed, "cap": cap}
    if cap >= seed:
        assert policy_from_dict(obj).cap_rows == cap
        return
    with pytest.raises(PolicyError) as info:
        policy_from_dict(obj)
    assert_one_line(info.value, "policy.cap")


@given(st.integers(1, 1000), st.integers(0, 2000))
def test_rotating_keep_must_be_below_max_size(max_size, keep):
    obj = {"name": "rotating", "max_size": max_size, "keep": keep}
    if keep < max_size:
        assert policy_from_dict(obj).keep_rows == keep
        return
    with pytest.raises(PolicyError) as info:
        policy_from_dict(obj)
    assert_one_line(info.value, "policy.keep")


unknown_names = st.one_of(
    st.text(max_size=10).filter(lambda s: s not in POLICY_NAMES), st.none(), st.integers(), st.lists(st.text())
)


@given(unknown_names)
def test_unknown_names_name_the_name(name):
    with pytest.raises(PolicyError) as info:
        policy_from_dict({"name": name})
    assert_one_line(info.value, "policy.name")


@given(st.sampled_from(sorted(VALID)), st.text(min_size=1, max_size=10))
def test_unknown_fields_are_named(name, key):
    allowed = {"name", "step", "max_size", "seed_rows", "factor", "cap", "mechanism", "context_tokens"}
    allowed |= {"slack_rows", "block_rows", "keep", "bits", "group_size"}
    if key in allowed:
        return
    with pytest.raises(PolicyError) as info:
        policy_from_dict({**VALID[name], key: 1})
    assert_one_line(info.value, f"policy.{key if key.isprintable() else repr(key)}")


@given(st.sampled_from([3, 5, 6, 8.0, 4.0, "8", True, 16]), st.sampled_from(["bits", "group_size"]))
def test_quantized_choices_reject_floats_and_unsupported_bits(value, field):
    with pytest.raises(PolicyError) as info:
        policy_from_dict({"name": "quantized", field: value})
    assert_one_line(info.value, f"policy.{field}")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 33), 1 << 33) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
all_fields = {f for fs in INT_FIELDS.values() for f in fs} | {"factor", "mechanism", "bits", "group_size"}
field_names = st.sampled_from(sorted(all_fields))


@given(st.one_of(st.sampled_from(POLICY_NAMES), json_values), st.dictionaries(field_names, json_values, max_size=4))
def test_any_json_object_gives_a_policy_or_a_one_line_policy_error(name, fields):
    try:
        policy = policy_from_dict({"name": name, **fields}, ratio=4, context_tokens=4096)
    except PolicyError as err:
        assert err.field.startswith("policy")
        assert "\n" not in str(err)
    else:
        assert policy.name == name
        grown = policy.grow(0, 0, 7)
        assert grown is not None and grown.capacity_rows >= 1
