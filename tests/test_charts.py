"""Altair builders on SimResults built by hand: points per run, downsampling, layers of the chart."""

from __future__ import annotations

import pandas as pd

from kvsim.dashboard import charts
from kvsim.sim.result import SimResult, Summary, TimelineRun

MIB = 1 << 20


def _summary(peak: int) -> Summary:
    return Summary(peak, 0, peak, peak, peak, 1, 0, 0, peak, peak, None)


def _result(runs: list[TimelineRun]) -> SimResult:
    return SimResult("t", "mlx-cpu", "step", tuple(runs), (), _summary(max(r.peak_bytes for r in runs)))


def _two_runs() -> SimResult:
    prefill = TimelineRun(0, 2, 0, 512, 4 * MIB, 0, 6 * MIB, 1024, 4 * MIB, grew=True)
    decode = TimelineRun(2, 100, 1024, 1, 5 * MIB, 0, 5 * MIB, 1280, 5 * MIB)
    return _result([prefill, decode])


def test_a_run_of_identical_steps_is_two_points_per_metric() -> None:
    frame = charts.timeline_frame({"p": _two_runs()})
    per_metric = frame.groupby("metric").size()
    assert set(per_metric) == {4}  # two runs, two points each
    active = frame[frame.metric == "active"].sort_values("tokens")
    assert active["tokens"].tolist() == [512, 1024, 1025, 1124]
    assert active["MiB"].tolist() == [4.0, 4.0, 5.0, 5.0]


def test_single_step_run_is_one_point() -> None:
    result = _result([TimelineRun(0, 1, 0, 100, MIB, 0, 2 * MIB, 100, MIB, grew=True)])
    frame = charts.timeline_frame({"p": result})
    assert len(frame) == len(charts.TIMELINE_METRICS)
    assert frame["tokens"].unique().tolist() == [100]


def test_downsampling_keeps_the_peak_and_bounds_points() -> None:
    runs = [TimelineRun(i, 1, i, 1, i * 10, 0, (7 * MIB if i == 4321 else i * 10), 0, 0) for i in range(10_000)]
    frame = charts.timeline_frame({"p": _result(runs)}, max_points=1200)
    peak = frame[frame.metric == "step peak"]
    assert len(peak) <= 400 and len(frame) <= 1200
    assert peak["MiB"].max() == 7.0
    assert peak["tokens"].is_monotonic_increasing


def test_growth_frame_has_one_row_per_growth_step() -> None:
    growths = charts.growth_frame({"p": _two_runs()})
    assert growths["tokens"].tolist() == [512, 1024]
    assert growths["MiB"].tolist() == [6.0, 6.0]


def test_timeline_chart_layers_line_points_and_limit() -> None:
    results = {"a": _two_runs(), "b": _two_runs()}
    spec = charts.timeline_chart(charts.timeline_frame(results), charts.growth_frame(results), limit_mib=5.5).to_dict()
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == ["line", "point", "rule", "text"]
    assert spec["layer"][0]["mark"]["interpolate"] == "step-after"
    no_limit = charts.timeline_chart(charts.timeline_frame(results), charts.growth_frame(results)).to_dict()
    assert [layer["mark"]["type"] for layer in no_limit["layer"]] == ["line", "point"]


def test_heatmap_ratio_layers_and_calibration_charts_validate() -> None:
    grid = pd.DataFrame({"step": [64, 256, 64, 256], "max_size": [512, 512, 2048, 2048], "peak (MiB)": [1.0, 2.0, 3.0, 4.0]})
    heat = charts.heatmap_chart(grid, "step", "max_size", "peak (MiB)", "peak (MiB)").to_dict()
    assert [layer["mark"]["type"] for layer in heat["layer"]] == ["rect", "text", "text"]
    assert [layer["mark"].get("color") for layer in heat["layer"]] == [None, "black", "white"]
    ratio = pd.DataFrame({"ratio": [1, 4, 1, 4], "label": ["a", "a", "b", "b"], "peak MiB": [4.0, 1.0, 3.0, 1.0], "grow_events": [1, 1, 2, 2]})
    assert charts.ratio_chart(ratio).to_dict()["encoding"]["x"]["scale"]["type"] == "log"
    records = [{"layer": i, "ratio": 1, "capacity_rows": 256, "used_rows": 200 + i} for i in range(3)]
    bars = charts.layers_chart(records).to_dict()
    assert bars["mark"]["type"] == "bar"
    data = next(iter(bars["datasets"].values()))
    assert len(data) == 6 and {d["rows"] for d in data} == {"capacity", "used"}
    cal = pd.DataFrame({"id": ["x"], "backend": ["mlx-cpu"], "policy": ["step"], "measured MiB": [2.0], "predicted MiB": [2.1], "error %": [5.0]})
    assert [layer["mark"]["type"] for layer in charts.calibration_chart(cal).to_dict()["layer"]] == ["line", "circle"]


def test_many_long_series_stay_under_altairs_row_limit() -> None:
    runs = [TimelineRun(i, 1, i, 1, i, 0, i, 0, i, grew=i % 97 == 0) for i in range(3000)]
    results = {f"p{i}": _result(runs) for i in range(8)}
    frame = charts.timeline_frame(results)
    assert len(frame) <= charts.MAX_POINTS
    charts.timeline_chart(frame, charts.growth_frame(results), 1.0).to_dict()  # raises MaxRowsError above 5000
