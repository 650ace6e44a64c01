"""The one entry point the CLI, the dashboard and notebooks share: scenario in, result out."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from kvsim.scenario.parse import Scenario
from kvsim.sim import memo
from kvsim.sim.engine import Engine
from kvsim.sim.extrapolate import play
from kvsim.sim.peak_range import PeakEstimate, estimate_peak
from kvsim.sim.profile import BackendProfile, load_profile
from kvsim.sim.result import SimResult, Summary, TimelineRun
from kvsim.sim.sessions import SessionsResult, play_sessions
from kvsim.sim.timeline import Timeline, first_over, peak_run

MEMO_MAX_EVENTS = 20_000  # results with more per-buffer events than this are not kept


def simulate(
    scenario: Scenario,
    *,
    profile: BackendProfile | None = None,
    memory_limit_bytes: int | None = None,
    record_events: bool = True,
    exact: bool = False,
) -> SimResult:
    """Simulate one scenario; a pure function of its arguments.

    Args:
        scenario: A parsed contract scenario.
        profile: Backend profile; defaults to the shipped profile of ``scenario.backend``.
        memory_limit_bytes: Reports the first step whose peak exceeds it.
        record_events: Keep per-buffer alloc/free events of growth steps.
        exact: Replay every growth step op by op (the reference); by default repeating cycles of
            steps are derived (``kvsim.sim.extrapolate``).

    Results are kept per process (``kvsim.sim.memo``): the same scenario again, under any id, is not
    simulated twice.
    """
    profile = profile or load_profile(scenario.backend)

    def run() -> SimResult:
        engine = play(scenario, profile, record_events, exact)
        return SimResult(
            scenario.id, profile.name, scenario.policy_name, _frozen(engine.timeline), tuple(engine.events),
            _summary(engine, estimate_peak(scenario, profile, engine, exact), memory_limit_bytes),
        )

    key = memo.key(scenario, profile, memory_limit_bytes, record_events, exact)
    result = memo.cached(key, run, keep=lambda r: len(r.events) <= MEMO_MAX_EVENTS)
    return result if result.scenario_id == scenario.id else dataclasses.replace(result, scenario_id=scenario.id)


def _frozen(runs: list[TimelineRun] | Timeline) -> tuple[TimelineRun, ...] | Timeline:
    """The result's timeline: a tuple, or the fast engine's ``Timeline`` (runs made when read)."""
    return runs if isinstance(runs, Timeline) else tuple(runs)


def simulate_sessions(scenarios: Sequence[Scenario], *, profile: BackendProfile | None = None) -> SessionsResult:
    """Several generations (a server's concurrent requests) sharing one MLX allocator, interleaved
    step by step (``kvsim.sim.sessions``); returns their shared peak, which the sum of solo peaks overstates.

    Args:
        scenarios: Parsed contract scenarios, one per session, in turn order; one backend for all.
        profile: Backend profile; defaults to the shipped profile of the scenarios' backend.
    """
    backends = sorted({sc.backend for sc in scenarios})
    if len(backends) != 1:
        raise ValueError(f"scenarios: sessions share one allocator, so one backend, got {backends or 'no session'}")
    return play_sessions(scenarios, profile or load_profile(backends[0]))


def _summary(engine: Engine, peak: PeakEstimate, limit_bytes: int | None) -> Summary:
    runs = engine.timeline
    top = peak_run(runs)
    needed = sum(st.held_rows * c.row_bytes for st in engine.layers for c in st.components)
    over = None
    if limit_bytes is not None:
        over_run = first_over(runs, limit_bytes)
        over = None if over_run is None else over_run.first_step
    return Summary(
        peak_bytes=peak.peak_bytes,
        peak_step=top.first_step,
        final_active_bytes=runs[-1].active_bytes,
        final_kv_bytes=engine.kv_bytes(),
        steady_kv_bytes=top.kv_bytes,
        grow_events=engine.grow_events,
        bytes_copied=engine.bytes_copied,
        over_allocation_bytes=engine.kv_bytes() - needed,
        peak_low_bytes=peak.low_bytes,
        peak_high_bytes=peak.high_bytes,
        first_step_over_limit=over,
        decode_step_s=statistics.median(engine.decode_s) if engine.decode_s else None,
        growth_step_s=statistics.median(engine.growth_s) if engine.growth_s else None,
    )
