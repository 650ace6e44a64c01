"""The simpy event queue (``kvsim.sim.eval_simpy``) plays every eval exactly as the hand-written one
(``kvsim.sim.eval_sim``): same peaks, active bytes, step times and buffer events on shipped scenarios."""

from __future__ import annotations

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
