"""Fast mode (``kvsim.sim.extrapolate``) against the op-by-op reference (``simulate(exact=True)``)."""

from __future__ import annotations

import math

import pytest

from kvsim.api import simulate
from kvsim.calibration.sweep import build_sweep
from kvsim.scenario.parse import parse_scenario
from kvsim.sim.engine import simulate_timeline
from kvsim.sim.extrapolate import FastEngine, play
from kvsim.sim.profile import load_profile

BYTES = ("peak_bytes", "final_active_bytes", "peak_low_bytes", "peak_high_bytes", "final_kv_bytes", "grow_events",
         "bytes_copied", "over_allocation_bytes")
SAMPLE = build_sweep("default")[::6] + build_sweep("holdout")[::9]  # every policy family, both model kinds


@pytest.mark.parametrize("item", SAMPLE, ids=lambda item: item.scenario.id)
def test_calibration_scenarios_predict_the_same_bytes(item) -> None:  # noqa: ANN001
    fast = simulate(item.scenario, record_events=False).to_prediction()
    exact = simulate(item.scenario, record_events=False, exact=True).to_prediction()
    assert {k: fast.get(k) for k in BYTES} == {k: exact.get(k) for k in BYTES}


def _uniform(decode_tokens: int, backend: str = "mlx-cpu") -> object:
    return parse_scenario({"id": "u", "model": {"n_layers": 4, "kv_heads": 2, "head_dim": 64, "dtype": "float16"},
                           "policy": {"name": "step", "step": 64},
                           "workload": {"prompt_tokens": 512, "prefill_chunk": 512, "decode_tokens": decode_tokens},
                           "backend": backend})


@pytest.mark.parametrize("backend", ["mlx-cpu", "mlx-cuda"])
def test_a_long_step_run_matches_the_reference_byte_for_byte(backend: str) -> None:
    """CPU: the buffer cache repeats, most growth steps are derived. CUDA's cache keeps every
    old buffer (it never repeats), so the fast engine plays every step there."""
    sc = _uniform(12_000, backend)
    profile = load_profile(backend)
    calls = []

    class Counting(FastEngine):
        def step(self, start: int, n: int):  # noqa: ANN201
            calls.append(start)
            return super().step(start, n)

    import simpy

    env = simpy.Environment()
    fast = Counting(sc, profile, True)
    env.process(fast.run(env))
    env.run()
    exact = simulate_timeline(sc, profile, record_events=True)
    if backend == "mlx-cpu":
        assert len(calls) < exact.grow_events / 4 / 3  # most growth steps were derived, not played
    assert fast.timeline == exact.timeline
    assert (fast.grow_events, fast.bytes_copied) == (exact.grow_events, exact.bytes_copied)
    assert len(fast.events) == len(exact.events)
    for x, y in zip(fast.events, exact.events):  # bytes exact; times equal to float rounding
        assert (x.step, x.layer, x.kind, x.buffer, x.size_bytes, x.active_bytes) == (
            y.step, y.layer, y.kind, y.buffer, y.size_bytes, y.active_bytes)
        assert math.isclose(x.time_s, y.time_s, rel_tol=1e-9)
    for xs, ys in ((fast.growth_s, exact.growth_s), (fast.decode_s, exact.decode_s)):
        assert len(xs) == len(ys) and all(math.isclose(x, y, rel_tol=1e-9) for x, y in zip(xs, ys))


def test_cost_does_not_grow_with_tokens_once_cycles_repeat() -> None:
    import time

    def cost(tokens: int) -> float:
        t0 = time.perf_counter()
        simulate(_uniform(tokens), record_events=False)
        return time.perf_counter() - t0

    cost(2000)
    short, long = cost(20_000), cost(400_000)
    assert long < 4 * short  # 20x the tokens and growth steps


def test_timeline_affine_blocks_read_like_the_runs_they_stand_for() -> None:
    import random

    from kvsim.sim.result import TimelineRun
    from kvsim.sim.timeline import Timeline

    def run(i: int, peak: int) -> TimelineRun:
        return TimelineRun(i, 1, i, 1, 10 * i, 0, peak, 0, 0, i % 2 == 0)

    rng = random.Random(7)
    for _ in range(100):
        timeline, runs = Timeline(), []
        for i in range(8):
            if runs[3:] and rng.random() < 0.5:
                n, m = rng.choice([1, 2]), rng.randint(1, 4)
                cycle, prev = runs[-n:], runs[-2 * n:-n]
                timeline.extend_affine(cycle, prev, m)
                for k in range(1, m + 1):
                    for x, p in zip(cycle, prev):
                        f = [getattr(x, s) for s in x.__slots__]
                        g = [getattr(p, s) for s in p.__slots__]
                        runs.append(TimelineRun(*(a if isinstance(a, bool) else a + k * (a - b) for a, b in zip(f, g))))
            else:
                r = run(100 + i, rng.randint(0, 100))
                timeline.append(r)
                runs.append(r)
        assert list(timeline) == runs and len(timeline) == len(runs) and timeline[-1] == runs[-1]
        a, b = sorted(rng.sample(range(len(runs) + 1), 2))
        assert timeline[a:b] == runs[a:b]
        assert timeline[timeline.peak_index()] == max(runs, key=lambda r: r.peak_bytes)
        limit = rng.randint(0, 150)
        assert timeline.first_over(limit) == next((i for i, r in enumerate(runs) if r.peak_bytes > limit), None)
        cut = rng.randint(0, len(runs))
        timeline.truncate(cut)
        assert list(timeline) == runs[:cut]


def test_load_transients_of_a_timeline_give_the_load_low_of_all_its_runs() -> None:
    from kvsim.sim.peak_range import load_low, step_transients

    sc = _uniform(12_000)
    profile = load_profile("mlx-cpu")
    fast = play(sc, profile, False)
    runs = list(fast.timeline)
    assert len(step_transients(fast.timeline)) < len(step_transients(runs))  # blocks read at their ends
    for share in (0.0, 0.3, 0.68, 1.0):
        assert load_low(step_transients(fast.timeline), share) == load_low(step_transients(runs), share)
