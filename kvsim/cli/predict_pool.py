"""Predicting scenarios for the CLI: one by one (``simulate_each``), or for ``kvsim predict`` a process
pool with lines in input order and a progress bar.

Workers ignore SIGINT so that Ctrl-C reaches only the parent, which terminates the pool
(``multiprocessing.Pool.terminate``) and leaves what it already printed intact.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

from kvsim.scenario.budget import check_cost
from kvsim.scenario.parse import ScenarioError, parse_scenario

INLINE_MAX_SCENARIOS = 2  # fewer than this many per worker is not worth a pool's start


def simulate_each(objs: list[Any], backend: str | None, **kwargs: Any) -> Iterator[tuple[Any, Any, str | None]]:
    """(scenario id, result, None) or (id, None, one-line error) for each object, in order.

    One bad scenario never stops the others: an invalid one gives its ``ScenarioError``; anything
    else the simulator raises is reported as an internal error on one line.
    """
    from kvsim.api import simulate

    for obj in objs:
        sid = obj.get("id") if isinstance(obj, dict) else None
        try:
            scenario = parse_scenario(obj, backend)
            check_cost(scenario)
            yield sid, simulate(scenario, **kwargs), None
        except ScenarioError as err:
            yield sid, None, str(err)
        except Exception as err:  # noqa: BLE001 - reported, and the next scenario still runs
            yield sid, None, f"internal error: {type(err).__name__}: {err}"


def predict_line(obj: Any, backend: str | None, exact: bool = False) -> tuple[str, bool]:
    """One scenario's contract line (JSON text) and whether it is an error line."""
    ((sid, result, error),) = simulate_each([obj], backend, record_events=False, exact=exact)
    line = {"id": sid, "error": error} if error is not None else result.to_prediction()
    return json.dumps(line), error is not None


def _predict_job(job: tuple[Any, str | None, bool]) -> tuple[str, bool]:
    return predict_line(*job)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _progress(total: int) -> Any:
    """A tqdm bar on stderr when stderr is a terminal (stdout stays pure JSON lines), else None."""
    if total < 2 or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is an optional dependency (``kvsim[fit]``)
        return None
    return tqdm(total=total, unit="scenario", file=sys.stderr, leave=False)


def default_jobs() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def predict_lines(
    objs: list[Any], backend: str | None, jobs: int | None = None, exact: bool = False
) -> Iterator[tuple[str, bool]]:
    """(line, is_error) for each scenario, in input order; ``jobs`` worker processes; ``exact``: the
    op-by-op reference instead of fast mode."""
    jobs = min(jobs or default_jobs(), max(1, len(objs) // INLINE_MAX_SCENARIOS))
    if jobs <= 1:
        yield from _with_progress((predict_line(obj, backend, exact) for obj in objs), len(objs))
        return
    import kvsim.api  # noqa: F401 - imported once here, inherited by forked workers

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    pool = ctx.Pool(jobs, initializer=_ignore_sigint)  # before the bar: no tqdm thread is forked
    try:
        yield from _with_progress(pool.imap(_predict_job, [(obj, backend, exact) for obj in objs]), len(objs))
        pool.close()
    finally:
        pool.terminate()  # also on Ctrl-C or a closed stdout: no worker outlives the command
        pool.join()


def _with_progress(lines: Iterator[tuple[str, bool]], total: int) -> Iterator[tuple[str, bool]]:
    bar = _progress(total)
    try:
        for out in lines:
            yield out
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
