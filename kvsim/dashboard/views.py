"""The dashboard's views: one ``render_*`` function per tab, all computation in kvsim."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import streamlit as st

from kvsim.dashboard import charts, drawn, runner
from kvsim.dashboard.breakdown import layer_rows
from kvsim.dashboard.config import Inputs
from kvsim.dashboard.runner import RUN_CAP_S, Runner
from kvsim.dashboard.sweeps import Progress, Record, policy_label, scenario_for, summary_record
from kvsim.scenario.parse import Scenario
from kvsim.sim import memo
from kvsim.sim.result import SimResult
from policies.parse import PolicyError

MIB = charts.MIB
Simulated = tuple[SimResult, Record]  # a result and its summary record


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


def simulate_summarized(scenario: Scenario, memory_limit_bytes: int | None) -> Simulated:
    """A worker process's job: one prediction and its summary record (``sweeps.summary_record``, label
    left blank). The record's growth steps read every run of the timeline (0.5-1.5 s a result at 16M
    tokens, 10 ms at 128K): here, not in the page's reruns."""
    result = simulate_one(scenario, memory_limit_bytes)
    return result, summary_record("", result)


def fetch_many(
    scenarios: dict[str, Scenario], memory_limit_bytes: int | None, progress: Progress | None = None,
    sweep_cap_s: float | None = None,
) -> tuple[dict[str, Simulated], dict[str, str], list[str]]:
    """(result, summary record) by label of what finished within the answer budget, one-line errors (a
    cut simulation's says so), and the labels still computing (they fill in on the next refresh). A
    job is kept by the scenario without its id and the limit. With ``sweep_cap_s`` the scenarios are
    one sweep, cut as a whole past that cap (``runner.Sweep``)."""
    keys = {label: ("simulate", replace(s, id=None), memory_limit_bytes) for label, s in scenarios.items()}
    jobs = {key: (simulate_summarized, (key[1], memory_limit_bytes)) for key in keys.values()}
    done, failed, _ = session_runner().fetch(jobs, on_progress=progress, sweep_cap_s=sweep_cap_s)
    finished = {label: (replace(done[key][0], scenario_id=label), {**done[key][1], "label": label})
                for label, key in keys.items() if key in done}
    errors = {label: failed[key] for label, key in keys.items() if key in failed}
    return finished, errors, [label for label in scenarios if label not in finished and label not in errors]


def simulate_many(
    scenarios: dict[str, Scenario], memory_limit_bytes: int | None, progress: Progress | None = None
) -> tuple[dict[str, SimResult], dict[str, str], list[str]]:
    """``fetch_many``'s results alone."""
    finished, errors, pending = fetch_many(scenarios, memory_limit_bytes, progress)
    return {label: result for label, (result, _) in finished.items()}, errors, pending


def summaries_many(
    scenarios: dict[str, Scenario], memory_limit_bytes: int | None, progress: Progress | None = None,
    sweep_cap_s: float | None = None,
) -> tuple[dict[str, Record], dict[str, str], list[str]]:
    """``fetch_many``'s summary records alone."""
    finished, errors, pending = fetch_many(scenarios, memory_limit_bytes, progress, sweep_cap_s)
    return {label: record for label, (_, record) in finished.items()}, errors, pending


def forget() -> None:
    """Drop every kept result and chart spec (benchmarks time cold renders)."""
    runner.forget()
    memo.clear()
    simulate_cached.clear()
    drawn.forget()


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


def summary_frame(records: list[Record]) -> pd.DataFrame:
    """Headline numbers per policy (``sweeps.summary_record``s), bytes in MiB."""
    frame = pd.DataFrame(records)
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


def exports(inputs: Inputs, scenarios: dict[str, Scenario], results: dict[str, SimResult], summary: pd.DataFrame) -> None:
    """Download buttons: the scenarios as `kvsim predict` input, the summary and timeline CSVs."""
    objs = [obj for obj in inputs.scenario_objects([policy_label(p) for p in inputs.policies]) if obj["id"] in scenarios]
    col1, col2, col3 = st.columns(3)
    col1.download_button("scenarios JSON (kvsim predict)", json.dumps(objs, indent=1), "scenarios.json", "application/json")
    col2.download_button("summary CSV", summary.to_csv(index=False), "summary.csv", "text/csv")
    col3.download_button("timeline CSV", lambda: timeline_csv(results), "timeline.csv", "text/csv")  # made on click


def render_timeline(inputs: Inputs) -> None:
    """View 1: memory over tokens for each policy, growths marked, the limit drawn."""
    scenarios, errors = compared(inputs)
    for line in errors:
        st.error(line)
    if not scenarios:
        return
    finished, failed, pending = fetch_many(scenarios, inputs.kv_limit_bytes)
    report_unfinished(failed, pending)
    if not finished:
        return
    results = {label: result for label, (result, _) in finished.items()}
    scenarios = {label: s for label, s in scenarios.items() if label in results}
    limit = inputs.kv_limit_bytes
    for label, r in results.items():
        if r.summary.first_step_over_limit is not None:
            st.warning(f"{label}: exceeds the memory limit (minus weights) at step {r.summary.first_step_over_limit}")
    drawn.draw(charts.timeline_chart, charts.timeline_frame(results), charts.growth_frame(results),
               None if limit is None else limit / MIB, width="stretch")
    summary = summary_frame([record for _, record in finished.values()])
    st.dataframe(summary, hide_index=True, width="stretch")
    exports(inputs, scenarios, results, summary)


def render_layers(inputs: Inputs) -> None:
    """View 3: capacity vs used rows per layer at a chosen token (footprint arithmetic, in a worker: it
    replays the policy step by step, about 5 s for 16M decode tokens, which a rerun must not wait for)."""
    scenarios, errors = compared(inputs)
    for line in errors:
        st.error(line)
    if not scenarios:
        return
    total = next(iter(scenarios.values())).workload.total_tokens
    col1, col2 = st.columns([2, 1])
    label = col1.selectbox("policy", list(scenarios), key="layers_policy")
    token = int(col2.number_input("at token", 1, total, total, key="token", bind="query-params"))
    key = ("layers", replace(scenarios[label], id=None), token)
    done, failed, _ = session_runner().fetch({key: (layer_rows, (key[1], token))})
    if key in failed:
        st.warning(f"{label}: {failed[key]}")
        return
    if key not in done:
        st.info(f"Replaying {label}'s growth through token {token:,}: the layers appear when it finishes "
                f"(cut after {RUN_CAP_S:g} s).")
        return
    records = done[key]
    capacity = sum(r["capacity_bytes"] for r in records)
    used = sum(r["used_bytes"] for r in records)
    c1, c2, c3 = st.columns(3)
    c1.metric("KV capacity", f"{capacity / MIB:,.2f} MiB")
    c2.metric("rows written", f"{used / MIB:,.2f} MiB")
    c3.metric("over-allocation", f"{(capacity - used) / MIB:,.2f} MiB")
    drawn.draw(charts.layers_chart, records, width="stretch")
    st.dataframe(pd.DataFrame(records), hide_index=True, width="stretch")
