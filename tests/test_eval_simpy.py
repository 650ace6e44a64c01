"""The simpy event queue (``kvsim.sim.eval_simpy``) plays every eval exactly as the hand-written one
(``kvsim.sim.eval_sim``): same peaks, active bytes, step times and buffer events on shipped scenarios."""

from __future__ import annotations

import dataclasses

import pytest

from kvsim.calibration.sweep import build_sweep
from kvsim.sim import engine, eval_sim, eval_simpy
from kvsim.sim.profile import load_profile

SAMPLE_EVERY = 3  # every third scenario of the default calibration sweep (21 of 63 per backend)


def _play(monkeypatch: pytest.MonkeyPatch, scenario, backend: str, run_eval) -> tuple:  # noqa: ANN001
    monkeypatch.setattr(engine, "run_eval", run_eval)
    e = engine.simulate_timeline(scenario, load_profile(backend), record_events=True)
    return (
        max(r.peak_bytes for r in e.timeline),
        e.timeline[-1].active_bytes,
        tuple(e.timeline),
        tuple(e.growth_s),
        tuple(e.decode_s),
        tuple(e.events),
    )


@pytest.mark.parametrize("backend", ["mlx-cpu", "mlx-cuda"])
def test_simpy_queue_plays_the_sweep_like_the_hand_written_one(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    sample = build_sweep("default", backend)[::SAMPLE_EVERY]
    grew = 0
    for item in sample:
        hand = _play(monkeypatch, item.scenario, backend, eval_sim.run_eval)
        simpy_ = _play(monkeypatch, item.scenario, backend, eval_simpy.run_eval)
        names = ("peak", "final active", "timeline", "growth step times", "decode step times", "events")
        for name, h, s in zip(names, hand, simpy_):
            assert h == s, f"{item.scenario.id} on {backend}: {name} differs"
        grew += bool(hand[3])
    assert hand[0] > 0 and grew >= len(sample) // 2  # the sample exercises growth steps, not only decode


@pytest.mark.parametrize(("backend", "stall_op"), [("mlx-cpu", 20), ("mlx-cuda", 300)])
def test_simpy_queue_stalls_the_host_like_the_hand_written_one(
    monkeypatch: pytest.MonkeyPatch, backend: str, stall_op: int
) -> None:
    """``host_stall_op`` (analysis): the host waits for the worker before one op of each eval
    (a GPU is rarely behind the host: only a late op stalls it)."""
    stalled = dataclasses.replace(load_profile(backend), host_stall_op=stall_op)
    changed = 0
    for item in build_sweep("default", backend)[::12]:
        monkeypatch.setattr(engine, "run_eval", eval_sim.run_eval)
        hand = engine.simulate_timeline(item.scenario, stalled)
        free = engine.simulate_timeline(item.scenario, load_profile(backend))
        monkeypatch.setattr(engine, "run_eval", eval_simpy.run_eval)
        simpy_ = engine.simulate_timeline(item.scenario, stalled)
        assert (hand.timeline, hand.growth_s, hand.decode_s, hand.events) == (
            simpy_.timeline, simpy_.growth_s, simpy_.decode_s, simpy_.events), item.scenario.id
        changed += hand.growth_s + hand.decode_s != free.growth_s + free.decode_s
    assert changed  # the stall moved some step times, so the comparison exercised it
