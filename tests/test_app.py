"""The dashboard end to end with streamlit's AppTest and the real simulator (small defaults)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from kvsim.dashboard.config import make_inputs
from kvsim.scenario.parse import parse_scenario

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
SMALL = {"source": "custom", "prompt": "600", "chunk": "256", "decode": "100"}


def run(view: str | None = "Timeline", **params: str) -> AppTest:
    """Run the app once with URL query parameters; assert it raised nothing."""
    at = AppTest.from_file(APP, default_timeout=120)
    if view:
        at.query_params["view"] = view
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def specs(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]


def chart_data(chart) -> pd.DataFrame:
    """The first dataset streamlit shipped with a chart (Arrow IPC)."""
    return pa.ipc.open_stream(chart.proto.datasets[0].data.data).read_pandas()


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def test_default_view_renders_fast_with_chart_table_and_exports() -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["view"] = "Timeline"  # the KV explorer's first tab ("Will it fit?" opens first)
    start = time.perf_counter()
    at.run()
    first_s = time.perf_counter() - start
    assert not at.exception and not errors(at)
    timeline = specs(at)[0]
    assert [layer["mark"]["type"] for layer in timeline["layer"]][:2] == ["line", "point"]
    assert timeline["layer"][0]["mark"]["interpolate"] == "step-after"
    table = at.main.dataframe[0].value
    assert list(table["label"]) == ["step(step=256)", "geometric(factor=2, seed_rows=256)", "lowpeak(step=256)"]
    assert (table["peak MiB"] > 0).all()
    assert [b.proto.label for b in at.get("download_button")] == ["scenarios JSON (kvsim predict)", "summary CSV", "timeline CSV"]
    assert first_s < 10, f"default view took {first_s:.2f} s"


def test_widget_changes_rerun_with_new_results() -> None:
    at = run(**SMALL)
    before = at.main.dataframe[0].value["peak MiB"].tolist()
    at.number_input(key="decode").set_value(2000).run()
    after = at.main.dataframe[0].value["peak MiB"].tolist()
    assert not at.exception and all(a > b for a, b in zip(after, before))
    at.multiselect(key="policies").set_value(["step", "quantized", "paged"]).run()
    labels = at.main.dataframe[0].value["label"].tolist()
    assert labels == ["step(step=256)", "quantized(bits=8, group_size=64, step=256)", "paged(block_rows=16)"]


def test_quick_pattern_rewrites_the_layer_table_and_url() -> None:
    at = run(**SMALL)
    at.selectbox(key="pattern").set_value("even layers ratio 4, odd ratio 128")
    at.button[0].click().run()
    assert not at.exception
    assert at.data_editor[0].value["ratio"].tolist() == [4, 128] * 4
    assert at.query_params["layers"] == ",".join(["8/128/f16/4,8/128/f16/128"] * 4)  # the URL follows the table


def test_layer_table_from_url_and_bad_url_warns() -> None:
    at = run(**SMALL, layers="2*1/512/f16/4,1/512/bf16/128/64")
    table = at.data_editor[0].value
    assert table["ratio"].tolist() == [4, 4, 128] and table["dtype"].tolist() == ["float16", "float16", "bfloat16"]
    bad = run(**SMALL, layers="8*8/oops/f16/1")
    assert any("layers" in w.value and "head_dim" in w.value for w in bad.warning)
    assert bad.data_editor[0].value["head_dim"].tolist() == [128] * 8


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"edited_rows": {"0": {"head_dim": None}}, "added_rows": [], "deleted_rows": []}, "layer 0 head_dim: empty cell"),
        ({"edited_rows": {}, "added_rows": [], "deleted_rows": list(range(8))}, "layer table: must have at least one layer"),
        ({"edited_rows": {"2": {"kv_heads": 0}}, "added_rows": [], "deleted_rows": []}, "model.layers[2].kv_heads: must be >= 1, got 0"),
    ],
)
def test_bad_layer_tables_show_inline_errors(edit: dict, message: str) -> None:
    at = run(**SMALL)
    at.session_state["layers_editor_0"] = edit
    at.run()
    assert not at.exception
    assert any(message in e for e in errors(at)), errors(at)


def test_impossible_policy_settings_show_one_line_errors() -> None:
    at = run(**SMALL, **{"geometric.seed_rows": "4096", "geometric.cap": "1024"})
    assert errors(at) == ["geometric(cap=1024, factor=2, seed_rows=4096): policy.cap: must be >= seed_rows (4096), got 1024"]
    assert len(at.main.dataframe[0].value) == 2  # the other two policies are still shown
    text = run(**SMALL, **{"geometric.cap": "lots"})
    assert errors(text) == ["geometric cap: must be a whole number, 'context' or blank, got 'lots'"]
    zero = run(**SMALL, **{"step.step": "0"})
    assert any("policy.step: must be >= 1, got 0" in e for e in errors(zero))


def test_memory_limit_below_weights_and_over_limit_warning() -> None:
    at = run(**SMALL, device="Apple M2 Ultra 128 GB", weights_gib="120")
    assert errors(at) == ["memory limit: 96.0 GiB is not above the model weights (120.0 GiB), so nothing is left for the KV cache"]
    assert not at.get("vega_lite_chart")
    tight = run(**SMALL, device="custom", limit_gib="0.1", weights_gib="0.09")
    assert not errors(tight)
    assert any("exceeds the memory limit" in w.value for w in tight.warning)
    rule = [layer for layer in specs(tight)[0]["layer"] if layer["mark"]["type"] == "rule"]
    assert len(rule) == 1


def test_sweeps_view_draws_four_heatmaps_and_the_ratio_sweep() -> None:
    at = run("Sweeps", **SMALL)
    assert not errors(at)
    charts = specs(at)
    titles = {c.get("title") for c in charts[:4]}
    assert titles == {"peak (MiB)", "over-allocation (MiB)", "growth events", "bytes copied (MiB)"}
    cells = chart_data(at.get("vega_lite_chart")[0])
    assert len(cells) == 9 and set(cells["step"]) == {64, 256, 1024} and set(cells["max_size"]) == {512, 2048, 8192}
    assert (cells["peak (MiB)"] > 0).all()
    assert charts[4]["mark"]["type"] == "line"  # peak vs ratio
    bad = run("Sweeps", **SMALL, **{"sweep.prealloc.x_values": "64, big"})
    assert errors(bad) == ["step values: must be numbers separated by commas, got 'big'"]


def test_layers_view_shows_capacity_and_used_rows() -> None:
    at = run("Layers", **SMALL, token="300")
    assert [m.label for m in at.metric] == ["KV capacity", "rows written", "over-allocation"]
    records = at.main.dataframe[0].value
    assert records["used_rows"].tolist() == [256] * 8  # one 256-token prefill chunk by token 300
    assert records["capacity_rows"].tolist() == [256] * 8


def test_calibration_view_without_and_with_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSIM_CALIBRATION_DIR", str(tmp_path))
    empty = run("Calibration")
    assert any("No calibration data yet" in i.value for i in empty.info)
    from kvsim.calibration.calibrate import calibrate

    calibrate(tmp_path, sweep="default", limit=1, progress=False)  # one real MLX run
    at = run("Calibration")
    assert not errors(at)
    frame = at.main.dataframe[0].value
    assert len(frame) >= 1 and (frame["measured MiB"] > 0).all()
    assert frame["error %"].abs().lt(100).all()
    assert [m.label for m in at.metric] == ["measurements", "median |error|", "max |error|"]


def test_recommend_view_and_impossible_constraints() -> None:
    at = run("Recommend", **SMALL)
    assert any(s.value.startswith("Recommended: **") for s in at.success)
    none = run("Recommend", **SMALL, max_grows="0", max_over_pct="0")
    assert any("No candidate meets the constraints" in w.value for w in none.warning)


def test_exported_scenarios_are_accepted_by_kvsim_predict(tmp_path: Path) -> None:
    base = {"backend": "mlx-cpu", "model": {"preset": "llama-3.1-8b"}, "consumer": "last_row",
            "workload": {"prompt_tokens": 300, "prefill_chunk": 128, "decode_tokens": 10, "batch": 1}}
    inputs = make_inputs(base, [{"name": "step", "step": 256}, {"name": "geometric", "seed_rows": 64, "factor": 2.0}], [])
    objs = inputs.scenario_objects(["a", "b"])
    assert [parse_scenario(o).policy_name for o in objs] == ["step", "geometric"]
    path = tmp_path / "scenarios.json"
    path.write_text(json.dumps(objs))
    out = subprocess.run([sys.executable, "-m", "kvsim.cli", "predict", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [line["id"] for line in lines] == ["a", "b"] and all(line["peak_bytes"] > 0 for line in lines)


@pytest.mark.benchmark
def test_default_view_render_time() -> None:
    """Median render time of the default view, cold (cache cleared) and cached; prints both."""
    import statistics

    from kvsim.dashboard.views import simulate_cached

    cold, warm = [], []
    for _ in range(5):
        simulate_cached.clear()
        at = AppTest.from_file(APP, default_timeout=120)
        at.query_params["view"] = "Timeline"
        start = time.perf_counter()
        at.run()
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        at.run()
        warm.append(time.perf_counter() - start)
        assert not at.exception
    print(f"default view: cold median {statistics.median(cold):.3f} s, cached median {statistics.median(warm):.3f} s")
    assert statistics.median(cold) < 2.0
