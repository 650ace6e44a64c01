"""The dashboard's views: one ``render_*`` function per tab, all computation in kvsim."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import replace

import pandas as pd
import streamlit as st

from kvsim.dashboard import charts, drawn, runner
from kvsim.dashboard.breakdown import layer_rows
from kvsim.dashboard.config import Inputs
from kvsim.dashboard.runner import MAX_KEPT, RUN_CAP_S, Runner
from kvsim.dashboard.sweeps import Progress, Record, policy_label, scenario_for, summary_record
from kvsim.scenario.parse import Scenario
from kvsim.sim import memo
from kvsim.sim.result import SimResult
from policies.parse import PolicyError

MIB = charts.MIB
_summaries: OrderedDict[Hashable, Record] = OrderedDict()  # runner key -> summary record (label left blank)


@st.cache_data(max_entries=512, show_spinner=False)
def simulate_cached(scenario: Scenario, memory_limit_bytes: int | None) -> SimResult:
    """``kvsim.api.simulate`` keyed on the (hashable, frozen) scenario and the limit (in this process)."""
    return simulate_one(scenario, memory_limit_bytes)


def simulate_one(scenario: Scenario, memory_limit_bytes: int | None) -> SimResult:
    """A worker process's job: one prediction without per-buffer events."""
    from kvsim.api import simulate

    return simulate(scenario, memory_limit_bytes=memory_limit_bytes, record_events=False)


def warm_fit_imports() -> None:
    """Import in the dashboard's process what "Will it fit?" jobs import, so that the runner's workers,
    forked per job, start with it: ``kvsim.generation`` and mlx-lm's model classes (``mlx_lm.utils``
    imports transformers: about 1.8 s, which every fit job paid before building its model in 0.1 s).
    Called once the fit page is drawn (``pages.render``): its first job imports on its own meanwhile."""
    try:
        import mlx_lm.utils  # noqa: F401 - kvsim.generation.model._instantiate's import

        import kvsim.generation.predict  # noqa: F401
        import kvsim.generation.verdict  # noqa: F401
    except ImportError:  # no mlx-lm: the fit page says what to install
        pass


def session_runner() -> Runner:
    """This session's worker processes (``kvsim.dashboard.runner``)."""
    if "kvsim_runner" not in st.session_state:
        import kvsim.api  # noqa: F401 - imported here once, so that forked workers start warm

        st.session_state.kvsim_runner = Runner()
    return st.session_state.kvsim_runner


def _keys(scenarios: dict[str, Scenario], memory_limit_bytes: int | None) -> dict[str, Hashable]:
    """Each scenario's runner key by label: the scenario without its id, and the limit."""
    return {label: ("simulate", replace(s, id=None), memory_limit_bytes) for label, s in scenarios.items()}


def simulate_many(
    scenarios: dict[str, Scenario], memory_limit_bytes: int | None, progress: Progress | None = None
) -> tuple[dict[str, SimResult], dict[str, str], list[str]]:
    """Results by label of what finished within the answer budget, one-line errors (a cut
    simulation's says so), and the labels still computing (they fill in on the next refresh)."""
    keys = _keys(scenarios, memory_limit_bytes)
    jobs = {key: (simulate_one, (key[1], memory_limit_bytes)) for key in keys.values()}
    done, failed, _ = session_runner().fetch(jobs, on_progress=progress)
    results = {label: replace(done[key], scenario_id=label) for label, key in keys.items() if key in done}
    errors = {label: failed[key] for label, key in keys.items() if key in failed}
    return results, errors, [label for label in scenarios if label not in results and label not in errors]


def summaries_many(
    scenarios: dict[str, Scenario], memory_limit_bytes: int | None, progress: Progress | None = None
) -> tuple[dict[str, Record], dict[str, str], list[str]]:
    """``simulate_many`` with each result's summary record (``sweeps.summary_record``) in its place,
    kept by the simulation's key: its growth steps read the whole timeline (about 10 ms a result at
    128K tokens, 24 of them in the default sweeps), once rather than on every rerun."""
    keys = _keys(scenarios, memory_limit_bytes)
    results, errors, pending = simulate_many(scenarios, memory_limit_bytes, progress)
    records = {}
    for label, result in results.items():
        key = keys[label]
        if key not in _summaries:
            _summaries[key] = summary_record("", result)
            if len(_summaries) > MAX_KEPT:
                _summaries.popitem(last=False)
        _summaries.move_to_end(key)
        records[label] = {**_summaries[key], "label": label}
    return records, errors, pending


def forget() -> None:
    """Drop every kept result, summary and chart spec (benchmarks time cold renders)."""
    runner.forget()
    memo.clear()
    simulate_cached.clear()
    drawn.forget()
    _summaries.clear()


def report_unfinished(errors: dict[str, str], pending: list[str]) -> None:
    """One line for cut or failed simulations, one for those still computing."""
    for label, line in list(errors.items())[:3]:
        st.warning(f"{label}: {line}")
    if len(errors) > 3:
        st.warning(f"... and {len(errors) - 3} more not simulated")
    if pending:
        st.info(f"{len(pending)} still computing (shown as they finish; each is cut after {RUN_CAP_S:g} s): "
                + ", ".join(pending[:4]) + (" ..." if len(pending) > 4 else ""))


def compared(inputs: Inputs) -> tuple[dict[str, Scenario], list[str]]:
    """Each compared policy's scenario by label, and one-line errors of invalid ones."""
    scenarios, errors = {}, []
    for policy in inputs.policies:
        label = policy_label(policy)
        try:
            scenarios[label] = scenario_for(inputs.base, policy)
        except PolicyError as err:
            errors.append(f"{label}: {err}")
    return scenarios, errors


def results_of(inputs: Inputs) -> tuple[dict[str, SimResult], list[str]]:
    """Simulated results of the compared policies, and error lines."""
    scenarios, errors = compared(inputs)
    return {label: simulate_cached(s, inputs.kv_limit_bytes) for label, s in scenarios.items()}, errors


def summary_frame(results: dict[str, SimResult]) -> pd.DataFrame:
    """Headline numbers per policy, bytes in MiB."""
    frame = pd.DataFrame([summary_record(label, r) for label, r in results.items()])
    for col in [c for c in frame.columns if c.endswith("_bytes") or c == "bytes_copied"]:
        frame[col.replace("_bytes", "").replace("_", " ") + " MiB"] = frame.pop(col) / MIB
    first = ["label", "peak MiB", "steady kv MiB", "final kv MiB", "over allocation MiB", "grow_events", "bytes copied MiB"]
    return frame[first + [c for c in frame.columns if c not in first]]


def timeline_csv(results: dict[str, SimResult]) -> str:
    """Every timeline run of every policy as CSV (bytes exact)."""
    rows = [
        {"policy": label, **{f: getattr(run, f) for f in run.__slots__}}
        for label, result in results.items()
        for run in result.timeline
    ]
    return pd.DataFrame(rows).to_csv(index=False)


def exports(inputs: Inputs, scenarios: dict[str, Scenario], results: dict[str, SimResult]) -> None:
    """Download buttons: the scenarios as `kvsim predict` input, summary and timeline CSVs."""
    objs = [obj for obj in inputs.scenario_objects([policy_label(p) for p in inputs.policies]) if obj["id"] in scenarios]
    col1, col2, col3 = st.columns(3)
    col1.download_button("scenarios JSON (kvsim predict)", json.dumps(objs, indent=1), "scenarios.json", "application/json")
    col2.download_button("summary CSV", summary_frame(results).to_csv(index=False), "summary.csv", "text/csv")
    col3.download_button("timeline CSV", lambda: timeline_csv(results), "timeline.csv", "text/csv")  # made on click


def render_timeline(inputs: Inputs) -> None:
    """View 1: memory over tokens for each policy, growths marked, the limit drawn."""
    scenarios, errors = compared(inputs)
    for line in errors:
        st.error(line)
    if not scenarios:
        return
    results, failed, pending = simulate_many(scenarios, inputs.kv_limit_bytes)
    report_unfinished(failed, pending)
    if not results:
        return
    scenarios = {label: s for label, s in scenarios.items() if label in results}
    limit = inputs.kv_limit_bytes
    for label, r in results.items():
        if r.summary.first_step_over_limit is not None:
            st.warning(f"{label}: exceeds the memory limit (minus weights) at step {r.summary.first_step_over_limit}")
    drawn.draw(charts.timeline_chart, charts.timeline_frame(results), charts.growth_frame(results),
               None if limit is None else limit / MIB, width="stretch")
    st.dataframe(summary_frame(results), hide_index=True, width="stretch")
    exports(inputs, scenarios, results)


def render_layers(inputs: Inputs) -> None:
    """View 3: capacity vs used rows per layer at a chosen token (footprint arithmetic)."""
    scenarios, errors = compared(inputs)
    for line in errors:
        st.error(line)
    if not scenarios:
        return
    total = next(iter(scenarios.values())).workload.total_tokens
    col1, col2 = st.columns([2, 1])
    label = col1.selectbox("policy", list(scenarios), key="layers_policy")
    token = int(col2.number_input("at token", 1, total, total, key="token", bind="query-params"))
    records = layer_rows(scenarios[label], token)
    capacity = sum(r["capacity_bytes"] for r in records)
    used = sum(r["used_bytes"] for r in records)
    c1, c2, c3 = st.columns(3)
    c1.metric("KV capacity", f"{capacity / MIB:,.2f} MiB")
    c2.metric("rows written", f"{used / MIB:,.2f} MiB")
    c3.metric("over-allocation", f"{(capacity - used) / MIB:,.2f} MiB")
    drawn.draw(charts.layers_chart, records, width="stretch")
    st.dataframe(pd.DataFrame(records), hide_index=True, width="stretch")
