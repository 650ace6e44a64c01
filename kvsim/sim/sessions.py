"""Several generations sharing one MLX allocator (a server's concurrent requests), as simpy processes.

Each session is an ``Engine`` playing its scenario's steps one by one (prefill chunks, then one token
each); all of them allocate from one ``Allocator`` (one buffer cache, one set of counters) and evaluate
on one stream (one ``EvalState``: the CPU encoder's dispatch phase runs on across sessions). The stream
is a ``simpy.Resource`` of one slot: a session holds it for one step's ``mx.eval`` and queues again, so
the FIFO queue interleaves the sessions step by step (step i of each in turn) and the simpy clock adds
up their step times. The shared peak is the largest per-step peak of the shared allocator.

Unlike ``simulate``, no run of decode steps is skipped (another session may grow in the middle of it):
cost grows with tokens, so this is for server-sized workloads, not 1M-token contexts.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from kvsim.scenario.parse import Scenario
from kvsim.sim.allocator import Allocator
from kvsim.sim.engine import Engine
from kvsim.sim.eval_sim import Buffers, EvalState
from kvsim.sim.profile import BackendProfile


@dataclass(frozen=True, slots=True)
class SessionsResult:
    """What the interleaved sessions did to the shared allocator (bytes over the pools' baseline)."""

    scenario_ids: tuple[Any, ...]  # the sessions, in their turn order
    peak_bytes: int  # the shared peak: largest ``mx.get_peak_memory()`` of any step of any session
    peak_session: int  # index of the session whose step reached it
    peak_step: int  # that session's step index
    final_active_bytes: int  # active after every session's last step
    final_cache_bytes: int  # the shared buffer cache after the last step
    steps: tuple[int, ...]  # steps each session played
    simulated_s: float  # the sum of every step's simulated time (one stream: they run in turn)


@dataclass(slots=True)
class _Shared:
    """One allocator, one stream, and the peak seen so far."""

    alloc: Allocator
    buffers: Buffers
    state: EvalState
    stream: simpy.Resource
    peak: tuple[int, int, int] = (0, 0, 0)  # (bytes, session, step)


def _session_engine(scenario: Scenario, profile: BackendProfile, shared: _Shared) -> Engine:
    """An engine that allocates from the shared allocator and evaluates on the shared stream."""
    engine = Engine(scenario, profile, record_events=False)
    engine.alloc, engine.buffers, engine.eval_state = shared.alloc, shared.buffers, shared.state
    for shape in engine.pool_buffers:  # the pool is in the baseline: charged 0, held for the whole run
        engine.pool_buffers[shape] = bid = shared.buffers.new(0, 0.0)
        shared.buffers.incref(bid)
    return engine


def _session(env: simpy.Environment, index: int, engine: Engine, shared: _Shared) -> Generator[Any, Any, int]:
    """One generation: each step waits its turn on the stream, runs its eval, and gives the stream back."""
    start = 0
    for step, n in enumerate(engine.scenario.workload.step_tokens()):
        with shared.stream.request() as turn:
            yield turn
            out = engine.step(start, n)
            shared.peak = max(shared.peak, (out.peak_bytes, -index, -step))
            yield env.timeout(out.seconds)
        start += n
    return start


def play_sessions(scenarios: Sequence[Scenario], profile: BackendProfile) -> SessionsResult:
    """Interleave the scenarios' generations step by step on one allocator; return the shared peak."""
    if not scenarios:
        raise ValueError("scenarios: need at least one session, got none")
    env = simpy.Environment()
    alloc = Allocator(profile)
    shared = _Shared(alloc, Buffers(alloc), EvalState(), simpy.Resource(env, capacity=1))
    engines = [_session_engine(sc, profile, shared) for sc in scenarios]
    for i, engine in enumerate(engines):
        env.process(_session(env, i, engine, shared))
    env.run()
    peak_bytes, session, step = shared.peak
    return SessionsResult(
        tuple(sc.id for sc in scenarios), peak_bytes, -session, -step, alloc.active_bytes, alloc.cache_bytes,
        tuple(len(sc.workload.step_tokens()) for sc in scenarios), env.now,
    )
