"""A sweep that cannot finish is cut as a whole (issue #19), with streamlit's AppTest and the real
simulator: at 16M tokens every unfinished cell of a sweep is cut once the sweep's cap (set small here)
has passed since its first cell started, and the progress bar says how many; a small sweep is not cut."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvsim.dashboard import runner

APP = str(Path(__file__).resolve().parent.parent / "app.py")
CUSTOM = {"source": "custom", "prompt": "600", "chunk": "256"}
# 16M tokens in small steps: every cell takes seconds (here step=16: 7 s, prealloc step=32: 4.5 s), well past
# the cap set in these tests (60 s in the dashboard)
HEAVY = {**CUSTOM, "decode": "16000000", "policies": "step", "step.step": "16", "ratios": "1, 4",
         "sweep.prealloc.x_values": "16, 32"}
CAP_S = 1.0


def run(view: str, **params: str) -> AppTest:
    """One page run; tests/conftest.py's answer budget lets it wait until every cell is in or cut."""
    at = AppTest.from_file(APP, default_timeout=300)
    for key, value in {"view": view, **params}.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def bars(at: AppTest) -> list[str]:
    return [bar.proto.text for bar in at.get("progress")]


def test_sweeps_at_16m_tokens_are_cut_as_a_whole_after_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "SWEEP_CAP_S", CAP_S)
    start = time.monotonic()
    at = run("Sweeps", **HEAVY)
    elapsed_s = time.monotonic() - start
    # two sweeps (6 heatmap cells, 2 ratio cells), each cut CAP_S after its first cell started: cell by
    # cell, each after its own cap, 8 cells took 8 caps
    assert elapsed_s < 2 * CAP_S + 20, elapsed_s
    heat, ratio = bars(at)  # here "sweep: 0 of 6 simulated, 6 cut (...)"; a fast host may finish a cell
    assert re.fullmatch(rf"sweep: (\d) of 6 simulated, (?!0)\d cut \(the sweep's {CAP_S:g} s were spent\)", heat)
    assert re.fullmatch(rf"ratio sweep: \d of 2 simulated, [12] cut \(the sweep's {CAP_S:g} s were spent\)", ratio)
    cut_lines = [w.value for w in at.warning if " cells cut and left out" in w.value]
    assert len(cut_lines) == 2 and all(f"the sweep's {CAP_S:g} s were spent" in line for line in cut_lines)
    assert not at.session_state["kvsim_runner"].pending  # nothing left running or queued


def test_recommend_at_16m_tokens_names_the_cut_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "SWEEP_CAP_S", CAP_S)
    at = run("Recommend", **HEAVY)
    (bar,) = bars(at)
    assert bar.startswith("candidates: ") and f"cut (the sweep's {CAP_S:g} s were spent)" in bar
    head = [s.value for s in at.success] + [w.value for w in at.warning if "constraints" in w.value]
    assert head and (head[0].startswith("Best of the candidates simulated (") or "No candidate" in head[0])
    assert not at.session_state["kvsim_runner"].pending


def test_a_sweep_that_finishes_in_time_is_not_cut() -> None:
    at = run("Sweeps", **CUSTOM, decode="100")
    assert not bars(at)  # the bar is gone once every cell is in
    assert not [w.value for w in at.warning if "cut" in w.value]
    assert len(at.get("vega_lite_chart")) == 5  # four heatmaps and the ratio sweep


def test_candidates_take_turns_across_policies() -> None:
    """The recommendation's sweep tries every policy as given first, then their variants in turn, so a
    cut sweep has tried each policy (policy by policy, a slow first policy used the whole cap)."""
    from kvsim.dashboard.sweeps import candidate_policies, policy_label

    given = [{"name": "step", "step": 256}, {"name": "geometric", "seed_rows": 256, "factor": 2.0}, {"name": "full"}]
    labels = [policy_label(c) for c in candidate_policies(given)]
    assert labels[:4] == ["step(step=256)", "geometric(factor=2, seed_rows=256)", "full()", "step(step=64)"]
    assert len(labels) == len(set(labels)) == 6 + 4 + 1  # step: 256 and 5 more; geometric: 2 more seeds, 1 factor; full
