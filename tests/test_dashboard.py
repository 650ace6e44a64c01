"""Pure parts of the dashboard: URL encoding, layer table, sweeps, recommendation, devices, breakdown."""

from __future__ import annotations

import math

import pytest

from kvsim.dashboard import layers, state, sweeps
from kvsim.dashboard.breakdown import layer_rows, steps_through
from kvsim.dashboard.config import make_inputs
from kvsim.dashboard.devices import DEVICES, GIB, device_limit_bytes
from kvsim.dashboard.params import parse_cap
from kvsim.scenario.parse import parse_scenario


def test_layers_round_trip_through_the_url_encoding() -> None:
    rows = layers.apply_pattern(layers.default_rows(12), "5:1 local/global")
    text = state.encode_layers(rows)
    assert text == "5*8/128/f16/1/1024,8/128/f16/1,5*8/128/f16/1/1024,8/128/f16/1"
    assert state.decode_layers(text) == rows
    assert state.encode_layers(layers.default_rows(8)) == "8*8/128/f16/1"


@pytest.mark.parametrize("text", ["8*8/128/f16", "x*8/128/f16/1", "8/abc/f16/1", "2000*1/1/f16/1", ""])
def test_bad_layer_parameters_give_one_line_errors(text: str) -> None:
    with pytest.raises(ValueError) as err:
        state.decode_layers(text)
    assert "\n" not in str(err.value) and str(err.value).startswith("layers")


def test_sync_param_drops_defaults() -> None:
    params = {"layers": "old"}
    state.sync_param(params, "layers", "d", "d")
    assert params == {}
    state.sync_param(params, "layers", "x", "d")
    assert params == {"layers": "x"}


def test_patterns_set_ratio_and_window_only() -> None:
    rows = layers.default_rows(4, kv_heads=2, head_dim=64)
    ds4 = layers.apply_pattern(rows, "even layers ratio 4, odd ratio 128")
    assert [r["ratio"] for r in ds4] == [4, 128, 4, 128]
    assert all(r["kv_heads"] == 2 and r["head_dim"] == 64 for r in ds4)
    assert [r["ratio"] for r in layers.apply_pattern(ds4, "all ratio 1")] == [1, 1, 1, 1]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "layer table: must have at least one layer"),
        ([{"kv_heads": "x", "head_dim": 64, "dtype": "float16", "ratio": 1}], "layer 0 kv_heads: must be a number, got 'x'"),
        ([{"kv_heads": 8, "head_dim": math.nan, "dtype": "float16", "ratio": 1}], "layer 0 head_dim: empty cell"),
        ([{"kv_heads": 8, "head_dim": 64, "dtype": "int8", "ratio": 1}], "layer 0 dtype: must be one of"),
        ([{"kv_heads": 8, "head_dim": 64.5, "dtype": "float16", "ratio": 1}], "layer 0 head_dim: must be a whole number"),
    ],
)
def test_table_cells_are_validated(rows: list, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        layers.table_to_layers(rows)


def test_table_to_layers_parses_into_a_scenario() -> None:
    table = layers.apply_pattern(layers.default_rows(3), "5:1 local/global")
    model = {"layers": layers.table_to_layers(table)}
    scenario = parse_scenario({"id": 1, "model": model, "policy": {"name": "step"}, "workload": {"prompt_tokens": 10, "prefill_chunk": 5}})
    assert [x.window_rows for x in scenario.model.layers] == [1024, 1024, 1024]


def test_sweep_values_grids_and_candidates() -> None:
    assert sweeps.parse_values("64, 256,1024", "step") == [64, 256, 1024]
    assert sweeps.parse_values("1.5, 2", "factor", integer=False) == [1.5, 2.0]
    for text, field in (("64, abc", "step"), ("1.5", "step"), ("", "step")):
        with pytest.raises(ValueError, match=f"^{field}"):
            sweeps.parse_values(text, field)
    cells = sweeps.grid_policies({"name": "prealloc", "max_size": 1, "step": 1}, "step", [64, 256], "max_size", [512, 2048])
    assert [(c["step"], c["max_size"]) for c in cells] == [(64, 512), (256, 512), (64, 2048), (256, 2048)]
    assert len(sweeps.grid_policies({"name": "step"}, "step", [1, 2, 3], None, [])) == 3
    with pytest.raises(ValueError, match="different fields"):
        sweeps.grid_policies({"name": "step"}, "step", [1], "step", [2])
    candidates = sweeps.candidate_policies([{"name": "step", "step": 256}, {"name": "full"}])
    labels = [sweeps.policy_label(c) for c in candidates]
    assert labels[0] == "step(step=256)" and "step(step=64)" in labels and "full()" in labels
    assert len(labels) == len(set(labels)) == len(sweeps.CANDIDATES["step"]) + 1


def test_recommend_picks_lowest_peak_within_constraints() -> None:
    def rec(label: str, peak: int, steps: int, over: int, over_limit: int | None = None) -> dict:
        return {"label": label, "peak_bytes": peak, "growth_steps": steps, "over_allocation_bytes": over,
                "final_kv_bytes": 1000 + over, "first_step_over_limit": over_limit}

    records = [rec("a", 100, 50, 0), rec("b", 120, 2, 10), rec("c", 90, 1, 500), rec("d", 80, 0, 0, over_limit=3), {"label": "e", "error": "x"}]
    assert sweeps.recommend(records, sweeps.Constraints(10, 10.0))["label"] == "b"
    assert sweeps.recommend(records, sweeps.Constraints())["label"] == "c"
    assert sweeps.recommend(records, sweeps.Constraints(0, 0.0)) is None
    assert [r["label"] for r in sweeps.feasible(records, sweeps.Constraints(60, 10.0))] == ["a", "b"]


def test_with_ratio_touches_only_compressed_layers() -> None:
    mixed = [{"ratio": 1}, {"ratio": 4}]
    assert sweeps.with_ratio(mixed, 16) == [{"ratio": 1}, {"ratio": 16}]
    assert sweeps.with_ratio([{"ratio": 1}], 8) == [{"ratio": 8}]


def test_device_limits_follow_mlx_rules() -> None:
    m2 = device_limit_bytes("Apple M2 Ultra 128 GB")
    assert m2 == 96 * GIB
    assert device_limit_bytes("Apple M2 Ultra 128 GB", "MLX memory limit") == int(0.95 * 128 * GIB)
    h200 = next(d for d in DEVICES if d.kind == "cuda")
    assert h200.working_set_bytes == h200.mlx_memory_limit_bytes == int(0.95 * h200.ram_bytes)
    assert len({d.name for d in DEVICES}) == len(DEVICES)


def test_limit_below_weights_and_bad_cap_are_errors() -> None:
    inputs = make_inputs({}, [{"name": "step"}], [], memory_limit_bytes=10 * GIB, weights_bytes=12 * GIB)
    assert inputs.errors and inputs.errors[0].startswith("memory limit: 10.0 GiB is not above the model weights (12.0 GiB)")
    assert make_inputs({}, [], []).errors == ("policies: choose at least one policy to compare",)
    assert make_inputs({}, [{"name": "step"}], [], 10 * GIB, 2 * GIB).kv_limit_bytes == 8 * GIB
    assert parse_cap(" ") is None and parse_cap("context") == "context" and parse_cap("4096") == 4096
    with pytest.raises(ValueError, match="geometric cap: must be a whole number"):
        parse_cap("lots")


def test_breakdown_capacity_and_used_rows() -> None:
    obj = {
        "id": 1,
        "model": {"layers": [{"kv_heads": 2, "head_dim": 8, "ratio": 1}, {"kv_heads": 2, "head_dim": 8, "ratio": 4}]},
        "policy": {"name": "step", "step": 256},
        "workload": {"prompt_tokens": 1000, "prefill_chunk": 512, "decode_tokens": 600, "batch": 2},
    }
    scenario = parse_scenario(obj)
    assert steps_through(scenario.workload, 700) == [512]
    assert len(steps_through(scenario.workload, 1100)) == 2 + 100
    full, compressed = layer_rows(scenario, 1100)
    assert (full["used_rows"], full["capacity_rows"]) == (1100, 1280)  # 1024 after prefill, +256 in decode
    assert (compressed["used_rows"], compressed["capacity_rows"]) == (275, 512)  # 250 rows fit in 256; row 257 grows to 512
    assert full["capacity_bytes"] == 1280 * 2 * (2 * 8 * 2) * 2  # rows x K+V x row bytes x batch


def test_contract_layers_keep_every_preset_field() -> None:
    from kvsim.scenario.presets import PRESET_NAMES, load_preset

    for name in PRESET_NAMES:
        model = load_preset(name)
        again = parse_scenario({"id": 1, "model": {"layers": layers.contract_layers(model)}, "policy": {"name": "step"},
                                "workload": {"prompt_tokens": 8, "prefill_chunk": 8}}).model
        assert again.layers == model.layers
