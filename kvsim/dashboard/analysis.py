"""Views that run many simulations: sweeps, calibration and recommendation (progress bars)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from kvsim.dashboard import charts, drawn, runner, sweeps
from kvsim.dashboard.calibration import calibration_dir, compare
from kvsim.dashboard.config import Inputs
from kvsim.dashboard.params import NO_AXIS, PARAMS, SWEEP_DEFAULTS, SWEEP_POLICIES
from kvsim.dashboard.runner import RUN_CAP_S
from kvsim.dashboard.views import MIB, session_runner, simulate_one, summaries_many
from policies.parse import PolicyError

Q = "query-params"


def _progress(label: str) -> tuple[Any, sweeps.Progress]:
    bar = st.progress(0.0, text=label)

    def update(done: int, total: int) -> None:
        bar.progress(done / max(total, 1), text=f"{label}: {done}/{total}")

    return bar, update


def _is_cut(record: dict[str, Any]) -> bool:
    """A cell cut for time (the sweep's cap or its own), not an invalid setting."""
    return str(record.get("error", "")).startswith("cut:")


def _settle_bar(bar: Any, label: str, records: Sequence[dict[str, Any]], total: int, pending: int) -> None:
    """The progress bar once the page run stops waiting: still filling while cells compute, gone when
    all are in, and when some were cut, filled to the cells simulated with the count cut."""
    cut = sum(1 for r in records if _is_cut(r))
    simulated = sum(1 for r in records if "error" not in r)
    if pending:
        bar.progress((total - pending) / max(total, 1), text=f"{label}: {total - pending}/{total}"
                     + (f", {cut} cut" if cut else ""))
    elif cut:
        bar.progress(simulated / max(total, 1), text=f"{label}: {simulated} of {total} simulated, {cut} cut "
                     f"(the sweep's {runner.SWEEP_CAP_S:g} s were spent)")
    else:
        bar.empty()


def _frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Records with bytes in MiB; error rows dropped (reported separately)."""
    frame = pd.DataFrame([r for r in records if "error" not in r])
    for col in ("peak_bytes", "over_allocation_bytes", "bytes_copied"):
        if col in frame:
            frame[sweeps.METRICS[col]] = frame[col] / MIB
    if "grow_events" in frame:
        frame[sweeps.METRICS["grow_events"]] = frame["grow_events"]
    return frame


def _errors(records: Sequence[dict[str, Any]]) -> None:
    """One line for the cells cut for time, one for the invalid settings."""
    cut = [r for r in records if _is_cut(r)]
    if cut:
        st.warning(f"{len(cut)} cells cut and left out, e.g. {cut[0]['label']}: {cut[0]['error']}")
    bad = [r for r in records if "error" in r and not _is_cut(r)]
    if bad:
        st.warning(f"{len(bad)} settings are invalid and left out, e.g. {bad[0]['label']}: {bad[0]['error']}")


def _records(base: dict[str, Any], policies: Sequence[dict[str, Any]], limit_bytes: int | None,
             label: str, extra: Sequence[dict[str, Any]] | None = None) -> tuple[list[dict[str, Any]], int]:
    """Summary records of ``policies`` on ``base`` that finished within the answer budget (a progress
    bar), error records of invalid or cut ones; and how many are still computing. The cells are one
    sweep: once ``runner.SWEEP_CAP_S`` has passed since the first started, all unfinished are cut.
    ``extra[i]`` is merged into record ``i``."""
    scenarios, records_by_key = {}, {}
    for i, policy in enumerate(policies):
        key = f"{i}:{sweeps.policy_label(policy)}"
        try:
            scenarios[key] = sweeps.scenario_for(base if extra is None or "base" not in extra[i] else extra[i]["base"],
                                                 policy)
        except PolicyError as err:
            records_by_key[key] = {"label": sweeps.policy_label(policy), "policy": policy["name"], "error": str(err)}
    bar, update = _progress(label)
    summaries, failed, pending = summaries_many(scenarios, limit_bytes, update, sweep_cap_s=runner.SWEEP_CAP_S)
    for key, summary in summaries.items():
        records_by_key[key] = {**summary, "label": key.split(":", 1)[1]}
    for key, line in failed.items():
        records_by_key[key] = {"label": key.split(":", 1)[1], "policy": scenarios[key].policy_name, "error": line}
    records = []
    for i, policy in enumerate(policies):
        key = f"{i}:{sweeps.policy_label(policy)}"
        if key in records_by_key:
            more = {k: v for k, v in (extra[i] if extra else {}).items() if k != "base"}
            records.append({**more, **records_by_key[key], "_cell": i})
    _settle_bar(bar, label, records, len(policies), len(pending))
    return records, len(pending)


def _pending(count: int, total: int) -> None:
    if count:
        st.info(f"{count} of {total} cells still computing: they fill in as they finish "
                f"(those not done {runner.SWEEP_CAP_S:g} s after the sweep's first started are cut).")


def _base_policy(inputs: Inputs, name: str) -> dict[str, Any]:
    """The compared policy of that name (its sidebar parameters), else the defaults."""
    for policy in inputs.policies:
        if policy["name"] == name:
            return policy
    out: dict[str, Any] = {"name": name}
    out.update({p.field: p.default for p in PARAMS[name] if p.kind != "cap"})
    return out


def _axis(col: Any, name: str, which: str, fields: list[str], field: str, values: str) -> tuple[str | None, str]:
    options = fields if which == "x" else [NO_AXIS, *fields]
    chosen = col.selectbox(f"{which} axis", options, options.index(field), key=f"sweep.{name}.{which}", bind=Q)
    text = col.text_input(f"{which} values", values, key=f"sweep.{name}.{which}_values", bind=Q, disabled=chosen == NO_AXIS)
    return (None if chosen == NO_AXIS else chosen), text


def render_sweeps(inputs: Inputs) -> None:
    """View 2: heatmaps over two parameters of one policy, and a sweep over the layers' ratio. Both
    ask for their cells in the same page run, so the ratio sweep computes while the heatmaps fill in
    (it used to start only once a heatmap cell had finished, a page run later)."""
    _heatmaps(inputs)
    _ratio_sweep(inputs)


def _heatmaps(inputs: Inputs) -> None:
    """The heatmaps over one or two parameters of one policy."""
    top = st.columns(3)
    name = top[0].selectbox("policy to sweep", SWEEP_POLICIES, SWEEP_POLICIES.index("prealloc"), key="sweep_policy", bind=Q)
    fields = [p.field for p in PARAMS[name] if p.sweepable or p.kind == "choice"]
    x_field, x_text, y_field, y_text = SWEEP_DEFAULTS[name]
    x_field, x_text = _axis(top[1], name, "x", fields, x_field, x_text)
    y_field, y_text = _axis(top[2], name, "y", fields, y_field, y_text)
    kinds = {p.field: p.kind for p in PARAMS[name]}
    try:
        xs = sweeps.parse_values(x_text, f"{x_field} values", integer=kinds[x_field] != "float")
        ys = [] if y_field is None else sweeps.parse_values(y_text, f"{y_field} values", integer=kinds[y_field] != "float")
        cells = sweeps.grid_policies(_base_policy(inputs, name), x_field, xs, y_field, ys)
    except ValueError as err:
        st.error(str(err))
        return
    records, pending = _records(inputs.base, cells, inputs.kv_limit_bytes, "sweep")
    y_col = y_field or NO_AXIS
    for record in records:
        cell = cells[record.pop("_cell")]
        record[x_field], record[y_col] = cell[x_field], cell[y_field] if y_field else "-"
    _pending(pending, len(cells))
    _errors(records)
    frame = _frame(records)
    if frame.empty:
        return
    grid = st.columns(2)
    for i, title in enumerate(sweeps.METRICS.values()):
        drawn.draw(charts.heatmap_chart, frame[[x_field, y_col, title]], x_field, y_col, title, title, where=grid[i % 2],
                   width="stretch")  # the columns it draws: the spec is kept by their content
    st.download_button("sweep CSV", frame.to_csv(index=False), f"sweep-{name}.csv", "text/csv")


def _ratio_sweep(inputs: Inputs) -> None:
    st.subheader("Sweep over the ratio")
    st.caption("The compressed layers' ratio (every layer's, if none is compressed) set to each value, per compared policy.")
    text = st.text_input("ratios", "1, 4, 16, 64, 128", key="ratios", bind=Q)
    try:
        ratios = sweeps.parse_values(text, "ratios")
    except ValueError as err:
        st.error(str(err))
        return
    policies, extra = [], []
    for ratio in ratios:
        model_base = {**inputs.base, "model": {"layers": sweeps.with_ratio(inputs.layers, ratio)}}
        for policy in inputs.policies:
            policies.append(policy)
            extra.append({"ratio": ratio, "base": model_base})
    records, pending = _records(inputs.base, policies, inputs.kv_limit_bytes, "ratio sweep", extra)
    for record in records:
        record.pop("_cell")
    _pending(pending, len(policies))
    _errors(records)
    frame = _frame(records)
    if not frame.empty:
        frame["peak MiB"] = frame["peak_bytes"] / MIB
        drawn.draw(charts.ratio_chart, frame[["ratio", "peak MiB", "label", "grow_events"]], width="stretch")


def calibration_rows(paths: tuple[Path, ...]) -> tuple[list[dict[str, Any]], list[str]]:
    """A worker process's job: every calibration measurement against its prediction."""
    return compare(paths, simulate_one)


def render_calibration(inputs: Inputs) -> None:
    """View 4: predicted vs measured peaks of the measurements in data/calibration."""
    paths = sorted(calibration_dir().glob("*.jsonl"))
    if not paths:
        st.info(
            "No calibration data yet: data/calibration/ holds no *.jsonl files. "
            "Run `kvsim calibrate` on a machine with MLX to measure the reference workload; "
            "this view then compares each measurement with the simulator's prediction."
        )
        return
    key = ("calibration", tuple((str(p), p.stat().st_mtime_ns) for p in paths))
    bar, update = _progress("predicting")
    done, failed, pending = session_runner().fetch({key: (calibration_rows, (tuple(paths),))}, on_progress=update)
    bar.empty()
    if pending:
        st.info(f"Predicting {len(paths)} calibration files: the comparison appears when it finishes "
                f"(cut after {RUN_CAP_S:g} s).")
        return
    if key in failed:
        st.warning(f"calibration: {failed[key]}")
        return
    rows, problems = done[key]
    for line in problems[:5]:
        st.warning(line)
    if not rows:
        st.info("No usable measurement in the calibration files.")
        return
    frame = pd.DataFrame(rows)
    abs_err = frame["error %"].abs()
    c1, c2, c3 = st.columns(3)
    c1.metric("measurements", len(frame))
    c2.metric("median |error|", f"{abs_err.median():.2f} %")
    c3.metric("max |error|", f"{abs_err.max():.2f} %")
    drawn.draw(charts.calibration_chart, frame, width="stretch")
    st.dataframe(frame, hide_index=True, width="stretch")


def _constraints(inputs: Inputs) -> sweeps.Constraints:
    c1, c2 = st.columns(2)
    steps = c1.number_input("at most N growth steps", 0, 1 << 30, 64, key="max_grows", bind=Q,
                            help="Steps in which some layer's cache grows, counted once however many layers grow in them.")
    pct = c2.number_input("at most X % over-allocation", 0.0, 1e6, 25.0, key="max_over_pct", bind=Q,
                          help="KV capacity beyond the rows written at the end, in % of the bytes written.")
    return sweeps.Constraints(int(steps), float(pct), inputs.kv_limit_bytes)


def _recommend_table(records: Sequence[dict[str, Any]], c: sweeps.Constraints) -> None:
    """Every candidate that ran, those meeting the constraints first, each with what it misses."""
    frame = _frame(records)
    if frame.empty:
        return
    valid = [r for r in records if "error" not in r]
    frame.insert(1, "misses", ["; ".join(sweeps.failures(r, c)) for r in valid])
    frame.insert(1, "meets constraints", frame["misses"] == "")
    frame["growth steps"] = [r["growth_steps"] for r in valid]
    frame["over-allocation %"] = [sweeps.over_allocation_pct(r) for r in valid]
    cols = ["label", "meets constraints", "misses", "peak (MiB)", "growth steps", "over-allocation %", "over-allocation (MiB)",
            "growth events", "bytes copied (MiB)"]
    frame = frame.sort_values(["meets constraints", "peak_bytes"], ascending=[False, True])
    st.dataframe(frame[cols], hide_index=True, width="stretch",
                 column_config={"misses": st.column_config.TextColumn(width="large"),
                                **{col: st.column_config.NumberColumn(format="%.1f") for col in cols if "MiB" in col or "%" in col},
                                "growth events": st.column_config.NumberColumn(help="each layer's growth counted")})


def render_recommend(inputs: Inputs) -> None:
    """View 5: the candidate setting with the lowest peak under the user's constraints, or what each
    policy's closest candidate misses."""
    c = _constraints(inputs)
    candidates = sweeps.candidate_policies(inputs.policies)
    st.caption(f"{len(candidates)} candidates: each compared policy with its step, seed rows, factor, max size or block rows varied.")
    records, pending = _records(inputs.base, candidates, inputs.kv_limit_bytes, "candidates")
    for record in records:
        record.pop("_cell")
    _pending(pending, len(candidates))
    _errors(records)
    best = sweeps.recommend(records, c)
    cut = sum(1 for r in records if _is_cut(r))
    if best is not None:
        head = (f"Best so far ({pending} still computing)" if pending
                else f"Best of the candidates simulated ({cut} cut)" if cut else "Recommended")
        st.success(
            f"{head}: **{best['label']}**: peak {sweeps.size_text(best['peak_bytes'])}, {best['growth_steps']:,} growth steps, "
            f"{sweeps.over_allocation_pct(best):,.1f}% ({sweeps.size_text(best['over_allocation_bytes'])}) over-allocated."
        )
    elif records:
        lines = "\n".join(f"- {line}" for line in sweeps.why_none(records, c))
        st.warning(f"No candidate meets the constraints{' yet' if pending else ''}. What each policy's closest candidate misses:\n\n{lines}")
    _recommend_table(records, c)
