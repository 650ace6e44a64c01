"""Simulations for the dashboard in worker processes, within an answer budget.

A view asks for results (``fetch``); what is not known yet starts in a worker process (at most one
per core; the rest wait their turn). The view waits at most ``ANSWER_BUDGET_S`` and shows what
finished; the page then reruns while work is pending, so cells fill in as they finish. Work that an
input change abandoned is stopped (its process terminated) when the page's run ends, and work that
runs past ``RUN_CAP_S`` is cut with a message saying so. A sweep (``fetch(..., sweep_cap_s=...)``) is cut
as a whole: once ``SWEEP_CAP_S`` has passed since the first of its jobs started, every one of them not
finished is cut at once (``Sweep``). Finished results are kept server-wide.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

ANSWER_BUDGET_S = float(os.environ.get("KVSIM_ANSWER_BUDGET_S", "1.0"))  # a view waits at most this long
RUN_CAP_S = float(os.environ.get("KVSIM_RUN_CAP_S", "60"))  # a simulation running longer is cut
SWEEP_CAP_S = float(os.environ.get("KVSIM_SWEEP_CAP_S", "60"))  # a sweep's cells all cut after this long
MAX_KEPT = 4096  # finished results kept (least recently used dropped first)
MAX_SWEEPS = 64  # sweeps remembered per session (a cut one stays cut when shown again)
POLL_S = 0.02

Job = tuple[Callable[..., Any], tuple[Any, ...]]  # a picklable function and its arguments
_done: OrderedDict[Hashable, tuple[bool, Any]] = OrderedDict()  # key -> (ok, result or one-line error)


def cut_message() -> str:
    return f"cut: needs more than {RUN_CAP_S:g} s to simulate (fewer tokens or a larger step finish in time)"


def sweep_cut_message(cap_s: float, started: bool = True) -> str:
    """A cell of a sweep cut at the sweep's cap: still running then, or never started."""
    what = "still running when" if started else "not started before"
    return f"cut: {what} the sweep's {cap_s:g} s were spent (fewer tokens, cells or policies finish in time)"


def _child(conn: Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """A worker: run the job, send (ok, result or one-line error). SIGTERM and SIGINT go back to their
    default actions first: a worker forked from ``streamlit run`` inherits the server's handlers
    (streamlit/web/bootstrap.py ``_set_up_signal_handler``), which ask a server the worker does not run to
    stop, so ``terminate()`` left a cut or abandoned simulation running, orphaned, until it finished."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        conn.send((True, fn(*args)))
    except Exception as err:  # noqa: BLE001 - reported on one line in the view
        conn.send((False, f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


@dataclass(eq=False)
class Running:
    process: Any
    conn: Connection
    started_s: float


@dataclass(eq=False)
class Sweep:
    """Jobs asked for together (a sweep's cells), cut as a whole: once ``cap_s`` has passed since the
    first of them started, every one not finished is cut. Cells one at a time on one worker, each cut
    after its own ``RUN_CAP_S``, took 24 minutes for a 24-cell sweep at 16M tokens."""

    cap_s: float  # seconds from the first job's start until every unfinished job is cut
    started_s: float | None = None  # monotonic time the first of its jobs started; None: none yet
    cut: dict[Hashable, str] = field(default_factory=dict)  # job key -> the cut message (empty: not cut)


@dataclass(eq=False)
class Runner:
    """One session's worker processes."""

    workers: int = field(default_factory=lambda: max(1, (os.cpu_count() or 2) - 1))  # a core stays with the UI
    running: dict[Hashable, Running] = field(default_factory=dict)
    queued: OrderedDict[Hashable, Job] = field(default_factory=OrderedDict)
    wanted: set[Hashable] = field(default_factory=set)  # keys asked for during the current page run
    deadline_s: float = 0.0  # monotonic time after which this page run waits no more
    sweeps: OrderedDict[frozenset[Hashable], Sweep] = field(default_factory=OrderedDict)  # by their job keys
    wanted_sweeps: set[frozenset[Hashable]] = field(default_factory=set)  # sweeps asked for this page run

    # ---- a page run ---------------------------------------------------------------------------
    def begin(self, budget_s: float | None = None) -> None:
        """A page run starts: every ``fetch`` in it shares one answer budget (``ANSWER_BUDGET_S``)."""
        self.wanted, self.wanted_sweeps = set(), set()
        self.deadline_s = time.monotonic() + (ANSWER_BUDGET_S if budget_s is None else budget_s)

    def end(self) -> None:
        """Stop work no view of this run asked for: its input was abandoned."""
        for key in [k for k in self.running if k not in self.wanted]:
            self._stop(key)
        for key in [k for k in self.queued if k not in self.wanted]:
            del self.queued[key]
        for keys, sweep in self.sweeps.items():
            if keys not in self.wanted_sweeps and not sweep.cut:
                sweep.started_s = None  # its work was stopped: shown again, it gets its whole cap

    @property
    def pending(self) -> int:
        return len(self.running) + len(self.queued)

    # ---- results -------------------------------------------------------------------------------
    def fetch(
        self, jobs: Mapping[Hashable, Job], on_progress: Callable[[int, int], None] | None = None,
        sweep_cap_s: float | None = None,
    ) -> tuple[dict[Hashable, Any], dict[Hashable, str], list[Hashable]]:
        """(results, one-line errors, keys still pending) of ``jobs``, waiting at most until the page
        run's deadline (``begin``; outside a page run, one answer budget from now). With
        ``sweep_cap_s``, ``jobs`` are a sweep: cut as a whole once that long has passed since the first
        of them started (``Sweep``)."""
        self.wanted.update(jobs)
        sweep = None if sweep_cap_s is None else self._sweep(frozenset(jobs), sweep_cap_s)
        cut: Mapping[Hashable, str] = {} if sweep is None else sweep.cut
        for key, job in jobs.items():
            if key not in _done and key not in self.running and key not in cut:
                self.queued.setdefault(key, job)
        deadline = self.deadline_s or time.monotonic() + ANSWER_BUDGET_S
        while True:
            self._collect()
            self._cut_sweeps()
            self._start()
            finished = sum(1 for k in jobs if k in _done or k in cut)
            if on_progress is not None:
                on_progress(finished, len(jobs))
            if finished == len(jobs) or time.monotonic() >= deadline:
                break
            conns = [r.conn for r in self.running.values()]
            wait(conns, timeout=min(POLL_S * 5, max(0.0, deadline - time.monotonic()))) if conns else time.sleep(POLL_S)
        results, errors, pending = {}, {}, []
        for key in jobs:
            if key in _done:
                _done.move_to_end(key)
                ok, value = _done[key]
                (results if ok else errors)[key] = value
            elif key in cut:
                errors[key] = cut[key]
            else:
                pending.append(key)
        return results, errors, pending

    def poll(self) -> None:
        """Collect finished work, cut sweeps past their cap and start queued work, without waiting."""
        self._collect()
        self._cut_sweeps()
        self._start()

    # ---- sweeps --------------------------------------------------------------------------------
    def _sweep(self, keys: frozenset[Hashable], cap_s: float) -> Sweep:
        """The sweep of these job keys (remembered, least recently asked for dropped first)."""
        self.wanted_sweeps.add(keys)
        sweep = self.sweeps.setdefault(keys, Sweep(cap_s))
        self.sweeps.move_to_end(keys)
        while len(self.sweeps) > MAX_SWEEPS:
            self.sweeps.popitem(last=False)
        return sweep

    def _cut_sweeps(self) -> None:
        """Every sweep of this page run past its cap: its unfinished jobs stopped or unqueued, and cut."""
        now = time.monotonic()
        for keys in self.wanted_sweeps:
            sweep = self.sweeps.get(keys)
            if sweep is None or sweep.cut or sweep.started_s is None or now - sweep.started_s <= sweep.cap_s:
                continue
            for key in [k for k in keys if k not in _done]:
                sweep.cut[key] = sweep_cut_message(sweep.cap_s, started=key in self.running)
                if key in self.running:
                    self._stop(key)
                self.queued.pop(key, None)

    # ---- processes -----------------------------------------------------------------------------
    def _start(self) -> None:
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        while self.queued and len(self.running) < self.workers:
            key, (fn, args) = self.queued.popitem(last=False)
            parent, child = ctx.Pipe(duplex=False)
            process = ctx.Process(target=_child, args=(child, fn, args), daemon=True)
            process.start()
            child.close()
            self.running[key] = Running(process, parent, time.monotonic())
            for keys in self.wanted_sweeps:  # a sweep's clock starts with its first job, not while it waits
                sweep = self.sweeps.get(keys)
                if sweep is not None and sweep.started_s is None and key in keys:
                    sweep.started_s = self.running[key].started_s

    def _collect(self) -> None:
        now = time.monotonic()
        for key, run in list(self.running.items()):
            if run.conn.poll():
                try:
                    _keep(key, run.conn.recv())
                except EOFError:  # the process died without an answer
                    _keep(key, (False, f"worker exited with code {run.process.exitcode}"))
                self._stop(key)
            elif not run.process.is_alive():
                _keep(key, (False, f"worker exited with code {run.process.exitcode}"))
                self._stop(key)
            elif now - run.started_s > RUN_CAP_S:
                _keep(key, (False, cut_message()))
                self._stop(key)

    def _stop(self, key: Hashable) -> None:
        run = self.running.pop(key)
        if run.process.is_alive():
            run.process.terminate()
        run.process.join(timeout=1)
        if run.process.is_alive():  # SIGTERM caught after all: SIGKILL
            run.process.kill()
            run.process.join(timeout=1)
        run.conn.close()


def _keep(key: Hashable, outcome: tuple[bool, Any]) -> None:
    _done[key] = outcome
    if len(_done) > MAX_KEPT:
        _done.popitem(last=False)


def forget() -> None:
    """Drop every kept result (benchmarks time cold renders)."""
    _done.clear()
