"""Altair chart builders and the tidy frames they draw (no streamlit import).

Bytes are shown in MiB. Timelines are step functions over tokens processed: a run of
identical steps (one :class:`~kvsim.sim.result.TimelineRun`) becomes at most two points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import pandas as pd

from kvsim.sim.result import SimResult
from kvsim.sim.timeline import thinned

MIB = float(1 << 20)
TIMELINE_METRICS: dict[str, str] = {"peak_bytes": "step peak", "active_bytes": "active", "kv_bytes": "KV capacity"}
MAX_POINTS = 4500  # all series together: under Altair's default 5000-row limit
MAX_DRAWN_RUNS = 4_000  # a longer fast-mode timeline is drawn from evenly spaced copies of its cycles
LIMIT_SCALE = 2.0  # a limit above this many times the data's top is a note, not a rule that squashes the curves
LIMIT_COLOR = "#d62728"


def _downsample(frame: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """Bucket a long series over tokens, keeping each bucket's maximum (peaks stay visible)."""
    if len(frame) <= max_points:
        return frame
    edges = pd.cut(frame["tokens"], bins=max_points // 2, labels=False).to_numpy()
    grouped = frame.groupby(edges, sort=True)
    first = grouped.first()
    first["MiB"] = grouped["MiB"].max()
    last = grouped.last()
    last["MiB"] = first["MiB"]
    return pd.concat([first, last]).sort_values("tokens").drop_duplicates(["tokens"]).reset_index(drop=True)


def timeline_frame(results: Mapping[str, SimResult], max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Columns ``policy, metric, tokens, step, MiB``: tokens processed after each step.

    Each series keeps at most ``max_points`` / (number of series) points (at least 100).
    """
    per_series = max(100, max_points // max(1, len(results) * len(TIMELINE_METRICS)))
    parts: list[pd.DataFrame] = []
    for label, result in results.items():
        rows: list[dict[str, Any]] = []
        for run in thinned(result.timeline, MAX_DRAWN_RUNS):
            ends = [(run.first_step, run.first_token + run.tokens_per_step)]
            if run.step_count > 1:
                ends.append((run.first_step + run.step_count - 1, run.first_token + run.step_count * run.tokens_per_step))
            for step, tokens in ends:
                for field, metric in TIMELINE_METRICS.items():
                    rows.append({"policy": label, "metric": metric, "step": step, "tokens": tokens, "MiB": getattr(run, field) / MIB})
        series = pd.DataFrame(rows, columns=["policy", "metric", "step", "tokens", "MiB"])
        for _, one in series.groupby("metric", sort=False):
            parts.append(_downsample(one.reset_index(drop=True), per_series))
    if not parts:
        return pd.DataFrame(columns=["policy", "metric", "step", "tokens", "MiB"])
    return pd.concat(parts, ignore_index=True)


def growth_frame(results: Mapping[str, SimResult]) -> pd.DataFrame:
    """One row per growth step: ``policy, step, tokens, MiB`` (the step's peak)."""
    rows = [
        {"policy": label, "step": step, "tokens": tokens + run.tokens_per_step, "MiB": run.peak_bytes / MIB}
        for label, result in results.items()
        for run in thinned(result.timeline, MAX_DRAWN_RUNS)
        if run.grew
        for step, tokens in run.steps()
    ]
    return pd.DataFrame(rows, columns=["policy", "step", "tokens", "MiB"])


def _mib_text(mib: float) -> str:
    return f"{mib / 1024:,.1f} GiB" if mib >= 1024 else f"{mib:,.1f} MiB"


def limit_layers(limit_mib: float, top_mib: float) -> list[alt.Chart]:
    """The limit as a labelled dashed rule when it lies within ``LIMIT_SCALE`` x the data's top, else
    a note in the corner, so that a 96 GiB limit over 60 MiB curves leaves their y axis to them."""
    label = f"memory limit − weights: {_mib_text(limit_mib)}"
    if top_mib > 0 and limit_mib <= LIMIT_SCALE * top_mib:
        limit = pd.DataFrame({"MiB": [limit_mib], "label": [label]})
        rule = alt.Chart(limit).mark_rule(color=LIMIT_COLOR, strokeDash=[6, 3], strokeWidth=2).encode(y="MiB:Q", tooltip=["label"])
        return [rule, rule.mark_text(align="left", baseline="bottom", dx=4, dy=-3, color=LIMIT_COLOR).encode(x=alt.value(0), text="label:N")]
    ratio = limit_mib / top_mib if top_mib > 0 else 0.0
    times = f", {ratio:,.{0 if ratio >= 10 else 1}f}x the highest point" if ratio else ""
    note = pd.DataFrame({"label": [f"{label}: off the scale{times}"]})
    return [alt.Chart(note).mark_text(align="left", baseline="top", color=LIMIT_COLOR, fontWeight="bold")
            .encode(x=alt.value(6), y=alt.value(6), text="label:N", tooltip=["label"])]


def timeline_chart(frame: pd.DataFrame, growths: pd.DataFrame, limit_mib: float | None = None) -> alt.LayerChart:
    """Each policy's active, KV and step-peak memory over tokens, growths marked, limit drawn."""
    x = alt.X("tokens:Q", title="tokens processed")
    y = alt.Y("MiB:Q", title="MiB above baseline")
    pick = alt.selection_point(fields=["policy"], bind="legend")
    color = alt.Color("policy:N", scale=alt.Scale(scheme="tableau10"), legend=alt.Legend(orient="bottom", columns=2, labelLimit=400))
    dash = alt.StrokeDash(
        "metric:N", sort=list(TIMELINE_METRICS.values()), legend=alt.Legend(orient="bottom", title="series")
    )
    lines = (
        alt.Chart(frame)
        .mark_line(interpolate="step-after", strokeWidth=1.8)
        .encode(
            x=x, y=y, color=color, strokeDash=dash,
            opacity=alt.condition(pick, alt.value(1.0), alt.value(0.15)),
            tooltip=["policy", "metric", "step", "tokens", alt.Tooltip("MiB:Q", format=".2f")],
        )
        .add_params(pick)
    )
    layers: list[alt.Chart] = [lines]
    if len(growths):
        layers.append(
            alt.Chart(growths)
            .mark_point(shape="triangle-up", size=45, filled=True, opacity=0.8)
            .encode(x="tokens:Q", y="MiB:Q", color=alt.Color("policy:N", scale=alt.Scale(scheme="tableau10"), legend=None), tooltip=["policy", "step", "tokens", alt.Tooltip("MiB:Q", format=".2f")])
        )
    if limit_mib is not None:
        layers += limit_layers(limit_mib, float(frame["MiB"].max()) if len(frame) else 0.0)
    return alt.layer(*layers).properties(height=420).interactive(bind_y=False)


def heatmap_chart(frame: pd.DataFrame, x_field: str, y_field: str, metric: str, title: str) -> alt.LayerChart:
    """One metric over a two-parameter grid, the value printed in each cell."""
    frame = frame.copy()
    low, high = frame[metric].min(), frame[metric].max()
    light = (frame[metric] - low) > 0.55 * (high - low) if high > low else frame[metric] != frame[metric]
    frame["light"] = light  # viridis: high values are light cells, which need dark text
    base = alt.Chart(frame).encode(
        x=alt.X(f"{x_field}:O", title=x_field, axis=alt.Axis(labelAngle=0)),
        y=alt.Y(f"{y_field}:O", title=y_field, sort="descending"),
    )
    cells = base.mark_rect().encode(
        color=alt.Color(f"{metric}:Q", title=None, scale=alt.Scale(scheme="viridis")),
        tooltip=[x_field, y_field, alt.Tooltip(f"{metric}:Q", format=",.2f")],
    )
    text = alt.Text(f"{metric}:Q", format=",.4~g")
    dark = base.transform_filter(alt.datum.light).mark_text(fontSize=12, color="black").encode(text=text)
    white = base.transform_filter(~alt.datum.light).mark_text(fontSize=12, color="white").encode(text=text)
    return alt.layer(cells, dark, white).properties(title=title, height=200)


def ratio_chart(frame: pd.DataFrame) -> alt.Chart:
    """Peak (MiB) against the compressed layers' ratio, one line per policy (log x)."""
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("ratio:Q", scale=alt.Scale(type="log", base=2), title="ratio (tokens per row)"),
            y=alt.Y("peak MiB:Q"),
            color=alt.Color("label:N", title="policy", legend=alt.Legend(orient="bottom", columns=2, labelLimit=400)),
            tooltip=["label", "ratio", alt.Tooltip("peak MiB:Q", format=",.2f"), "grow_events"],
        )
        .properties(height=320)
    )


def layers_chart(records: Sequence[Mapping[str, Any]]) -> alt.Chart:
    """Capacity vs used rows per layer, side by side."""
    frame = pd.DataFrame(records)
    tidy = frame.melt(id_vars=["layer", "ratio"], value_vars=["capacity_rows", "used_rows"], var_name="rows", value_name="count")
    tidy["rows"] = tidy["rows"].str.replace("_rows", "")
    return (
        alt.Chart(tidy)
        .mark_bar()
        .encode(
            x=alt.X("layer:O"),
            xOffset="rows:N",
            y=alt.Y("count:Q", title="rows"),
            color=alt.Color("rows:N", scale=alt.Scale(domain=["capacity", "used"], range=["#9ecae9", "#1f77b4"]), legend=alt.Legend(orient="top")),
            tooltip=["layer", "ratio", "rows", "count"],
        )
        .properties(height=320)
    )


def calibration_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Predicted vs measured peak (MiB) with the y = x line."""
    top = float(max(frame["measured MiB"].max(), frame["predicted MiB"].max(), 1.0)) if len(frame) else 1.0
    diagonal = alt.Chart(pd.DataFrame({"a": [0.0, top], "b": [0.0, top]})).mark_line(color="gray", strokeDash=[4, 4]).encode(x="a:Q", y="b:Q")
    points = (
        alt.Chart(frame)
        .mark_circle(size=70)
        .encode(
            x=alt.X("measured MiB:Q"),
            y=alt.Y("predicted MiB:Q"),
            color=alt.Color("backend:N"),
            tooltip=["id", "backend", "policy", alt.Tooltip("measured MiB:Q", format=",.3f"), alt.Tooltip("predicted MiB:Q", format=",.3f"), alt.Tooltip("error %:Q", format="+.2f")],
        )
    )
    return alt.layer(diagonal, points).properties(height=380)
