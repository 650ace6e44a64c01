"""Issue #16: simpy ordering an eval's events (``kvsim.sim.eval_simpy``) against the hand-written queue
(``kvsim.sim.eval_sim``), side by side in one process: CPU seconds (``time.process_time``, best of
``REPEATS``, the two interleaved) of one DS4 1M-token decode prediction and of 100 distinct ones.

The hand-written queue stays the simulator's core while simpy costs more than ``MAX_SIMPY_RATIO`` times
as much (the figures are in ``eval_sim.run_eval``'s docstring); this benchmark fails when that reason no
longer holds, so the choice gets revisited. Run: ``pytest -m benchmark tests/bench/test_bench_simpy.py -s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kvsim.api import simulate
from kvsim.scenario.parse import Scenario, parse_scenario
from kvsim.sim import engine, eval_sim, eval_simpy

MAX_SIMPY_RATIO = 1.5  # issue #16: simpy orders the real events only if it costs at most this much
REPEATS = 3
GEOMETRIC = {"name": "geometric", "seed_rows": 4096, "cap": "context", "slack_rows": 2}


def ds4(decode_tokens: int, sid: str = "ds4-1m") -> Scenario:
    return parse_scenario({
        "id": sid, "model": {"preset": "deepseek-v4-flash"}, "policy": GEOMETRIC,
        "workload": {"prompt_tokens": 2048, "prefill_chunk": 2048, "decode_tokens": decode_tokens},
    })


def cpu_s(run_eval: Callable, scenarios: list[Scenario]) -> tuple[float, list[dict]]:
    """CPU seconds to predict every scenario with ``run_eval`` as the engine's eval, and the predictions."""
    engine.run_eval = run_eval
    t0 = time.process_time()
    out = [simulate(sc, record_events=False).to_prediction() for sc in scenarios]
    return time.process_time() - t0, out


@pytest.mark.benchmark
def test_simpy_event_queue_costs_more_than_the_hand_written_one() -> None:
    cases = {
        "DS4 1M decode": [ds4(1_000_000)],
        "100 DS4 ~1M predictions": [ds4(1_000_000 + 1000 * i, f"s{i}") for i in range(100)],
    }
    queues = {"hand-written": eval_sim.run_eval, "simpy": eval_simpy.run_eval}
    original = engine.run_eval
    ratios = {}
    try:
        cpu_s(eval_sim.run_eval, cases["DS4 1M decode"])  # warm-up: imports, profile and table loads
        cpu_s(eval_simpy.run_eval, cases["DS4 1M decode"])
        for case, scenarios in cases.items():
            best = {name: float("inf") for name in queues}
            preds = {}
            for _ in range(REPEATS):
                for name, run_eval in queues.items():
                    s, preds[name] = cpu_s(run_eval, scenarios)
                    best[name] = min(best[name], s)
            assert preds["simpy"] == preds["hand-written"], case
            ratios[case] = best["simpy"] / best["hand-written"]
            print(f"{case}: hand-written {best['hand-written']:.3f} s CPU, simpy {best['simpy']:.3f} s CPU, "
                  f"ratio {ratios[case]:.2f}x")
    finally:
        engine.run_eval = original
    assert max(ratios.values()) > MAX_SIMPY_RATIO, f"simpy within {MAX_SIMPY_RATIO}x ({ratios}): revisit eval_sim's core"
