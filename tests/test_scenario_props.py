"""Property tests: any JSON value parses to a Scenario or a one-line ScenarioError naming a field."""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.scenario.parse import Scenario, ScenarioError, parse_scenario

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
sizes = st.one_of(st.integers(-3, 5000), st.floats(-1, 10), st.text(max_size=3), st.none(), st.booleans())


@st.composite
def near_valid(draw: st.DrawFn) -> dict:
    return {
        "id": draw(st.one_of(st.text(max_size=5), st.integers(), st.none())),
        "model": {"n_layers": draw(sizes), "kv_heads": draw(sizes), "head_dim": draw(sizes),
                  "dtype": draw(st.sampled_from(["float16", "bfloat16", "float32", "fp8"]))},
        "policy": draw(st.sampled_from([
            {"name": "step", "step": draw(sizes)},
            {"name": "geometric", "seed_rows": draw(sizes), "factor": draw(sizes), "cap": draw(sizes)},
            {"name": "prealloc", "max_size": draw(sizes)},
            {"name": "quantized", "bits": draw(sizes), "group_size": draw(sizes)},
            {"name": draw(st.text(max_size=6))},
        ])),
        "workload": {"prompt_tokens": draw(sizes), "prefill_chunk": draw(sizes), "decode_tokens": draw(sizes)},
    }


def _check(obj: object) -> None:
    try:
        scenario = parse_scenario(obj)
    except ScenarioError as err:
        message = str(err)
        assert message and "\n" not in message and ":" in message
        known = {"scenario", "id", "backend", "model", "policy", "workload", "consumer", "window_layers"}
        root = err.field.split(".")[0].split("[")[0]
        assert root in known or (err.problem.startswith("unknown field") and isinstance(obj, dict))
        again = pickle.loads(pickle.dumps(err))  # crosses a process pool as the same one-line error
        assert type(again) is type(err) and str(again) == message and again.field == err.field
    else:
        assert isinstance(scenario, Scenario)
        assert scenario.workload.prefill_chunk >= 1 and scenario.model.n_layers >= 1


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_parses_or_fails_cleanly(obj: object) -> None:
    _check(obj)


@settings(max_examples=300, deadline=None)
@given(near_valid())
def test_near_valid_scenarios_parse_or_fail_cleanly(obj: dict) -> None:
    _check(obj)


def test_scenario_roundtrips_through_to_dict() -> None:
    obj = {
        "id": "r", "model": {"preset": "deepseek-v4-flash"}, "policy": {"name": "geometric", "seed_rows": 4096},
        "workload": {"prompt_tokens": 4096, "prefill_chunk": 2048, "decode_tokens": 10},
    }
    scenario = parse_scenario(obj)
    again = parse_scenario(scenario.to_dict())
    assert again.model.layers == scenario.model.layers and again.policy == scenario.policy
