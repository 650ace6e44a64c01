"""The dashboard's worker processes (kvsim.dashboard.runner): budget, results kept, abandoned work stopped, cut."""

from __future__ import annotations

import time

import pytest

from kvsim.dashboard import runner
from kvsim.dashboard.views import simulate_one
from kvsim.scenario.parse import parse_scenario

SMALL = {"id": "r", "model": {"n_layers": 2, "kv_heads": 2, "head_dim": 64, "dtype": "float16"},
         "policy": {"name": "step", "step": 64}, "workload": {"prompt_tokens": 256, "prefill_chunk": 256, "decode_tokens": 300}}


def test_a_simulation_answers_in_a_worker_and_is_kept() -> None:
    from kvsim.api import simulate

    runner.forget()
    work = runner.Runner()
    work.begin(budget_s=120)
    sc = parse_scenario(SMALL)
    done, failed, pending = work.fetch({"a": (simulate_one, (sc, None))})
    assert not failed and not pending
    assert done["a"].summary == simulate(sc, record_events=False).summary
    work.begin(budget_s=0)
    again, _, pending = work.fetch({"a": (simulate_one, (sc, None))})
    assert again["a"] is done["a"] and not pending and not work.running  # kept: no new process


def test_past_the_budget_work_is_pending_then_stopped_when_abandoned() -> None:
    work = runner.Runner(workers=1)
    work.begin(budget_s=0.2)
    start = time.monotonic()
    done, failed, pending = work.fetch({"slow": (time.sleep, (30,)), "queued": (time.sleep, (30,))})
    assert time.monotonic() - start < 5 and pending == ["slow", "queued"] and not done and not failed
    process = work.running["slow"].process
    assert process.is_alive() and list(work.queued) == ["queued"]
    work.begin()
    work.end()  # the next page run asked for neither: both are dropped, the running one terminated
    assert not work.running and not work.queued and not process.is_alive()


def test_work_past_the_cap_is_cut_with_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "RUN_CAP_S", 0.3)
    runner.forget()
    work = runner.Runner()
    work.begin(budget_s=10)
    done, failed, pending = work.fetch({"long": (time.sleep, (30,))})
    assert not done and not pending and failed["long"].startswith("cut: needs more than 0.3 s")


def test_an_exception_is_one_line() -> None:
    work = runner.Runner()
    work.begin(budget_s=60)
    _, failed, _ = work.fetch({"bad": (int, ("x",))})
    assert failed["bad"] == "ValueError: invalid literal for int() with base 10: 'x'"


def test_abandoned_work_stops_when_the_server_catches_sigterm() -> None:
    """``streamlit run`` installs a SIGTERM handler that forked workers inherit; terminating one must
    still stop it (it used to keep simulating, orphaned)."""
    import signal

    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # as streamlit's bootstrap does
    try:
        work = runner.Runner(workers=1)
        work.begin(budget_s=0.2)
        work.fetch({"slow": (time.sleep, (30,))})
        process = work.running["slow"].process
        time.sleep(0.3)  # the worker is inside the job, past its start-up
        work.begin()
        start = time.monotonic()
        work.end()
        assert not process.is_alive() and time.monotonic() - start < 1.0
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_sweep_past_its_cap_is_cut_as_a_whole() -> None:
    """Once the sweep's cap has passed since its first job started, the running job is stopped and the
    queued ones are cut without starting; a job that finished in time keeps its result."""
    runner.forget()
    work = runner.Runner(workers=1)
    work.begin(budget_s=30)
    jobs = {"quick": (time.sleep, (0.05,)), "slow": (time.sleep, (30,)), "queued": (time.sleep, (30,))}
    start = time.monotonic()
    done, failed, pending = work.fetch(jobs, sweep_cap_s=0.5)
    assert time.monotonic() - start < 5 and not pending and list(done) == ["quick"]
    assert failed == {"slow": runner.sweep_cut_message(0.5), "queued": runner.sweep_cut_message(0.5, started=False)}
    assert failed["slow"].startswith("cut: still running when the sweep's 0.5 s were spent")
    assert failed["queued"].startswith("cut: not started before the sweep's 0.5 s were spent")
    assert not work.running and not work.queued
    work.begin(budget_s=30)
    again = work.fetch(jobs, sweep_cap_s=0.5)
    assert again == (done, failed, []) and not work.running  # still cut: nothing restarted


def test_a_sweeps_clock_starts_with_its_first_job_not_while_it_waits() -> None:
    runner.forget()
    work = runner.Runner(workers=1)
    work.begin(budget_s=0)
    work.fetch({"other": (time.sleep, (2.0,))})  # holds the one worker for 2 s
    work.deadline_s = time.monotonic() + 30
    sweep = {"x": (time.sleep, (0.2,)), "y": (time.sleep, (0.2,))}
    done, failed, pending = work.fetch(sweep, sweep_cap_s=1.5)  # 2 s waiting, then 0.4 s running
    assert set(done) == {"x", "y"} and not failed and not pending
