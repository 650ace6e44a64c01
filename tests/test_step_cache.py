"""Step results shared across runs (``kvsim.sim.step_cache``): a hit leaves the engine exactly as playing."""

from __future__ import annotations

import pytest
import simpy

from kvsim.api import simulate
from kvsim.scenario.parse import parse_scenario
from kvsim.sim import memo, step_cache
from kvsim.sim.engine import simulate_timeline
from kvsim.sim.extrapolate import FastEngine
from kvsim.sim.profile import load_profile

GEOMETRIC = {"name": "geometric", "seed_rows": 4096, "cap": "context", "slack_rows": 2}


def _scenario(decode_tokens: int, model: str = "deepseek-v4-flash", policy: dict = GEOMETRIC) -> object:
    return parse_scenario({"id": f"d{decode_tokens}", "model": {"preset": model}, "policy": policy,
                           "workload": {"prompt_tokens": 2048, "prefill_chunk": 2048, "decode_tokens": decode_tokens}})


class _Counting(FastEngine):
    played = 0

    def play_step(self, plan):  # noqa: ANN001, ANN201
        type(self).played += 1
        return super().play_step(plan)


def _fast(sc: object) -> FastEngine:
    env = simpy.Environment()
    engine = _Counting(sc, load_profile("mlx-cpu"), False)
    env.process(engine.run(env))
    env.run()
    return engine


@pytest.mark.parametrize(("model", "tokens"), [("llama-3.1-8b", (40_000, 41_000, 42_000)),
                                             ("deepseek-v4-flash", (1_000_000, 1_001_000))])
def test_predictions_sharing_their_first_steps_match_the_reference_byte_for_byte(model: str, tokens: tuple) -> None:
    """Geometric runs that differ in length (a cap at the context) share every step before their last growths."""
    memo.clear()
    _Counting.played = 0
    first = _fast(_scenario(tokens[0], model))
    played_first = _Counting.played
    for n in tokens[1:]:
        _Counting.played = 0
        sc = _scenario(n, model)
        fast = _fast(sc)
        exact = simulate_timeline(sc, load_profile("mlx-cpu"), False)
        assert 0 < _Counting.played < played_first  # some steps came from the cache, the last growths did not
        assert list(fast.timeline) == exact.timeline
        assert step_cache.capture(fast) == step_cache.capture(exact)  # buffer ids, refs, cache order, clocks
        assert (fast.grow_events, fast.bytes_copied, fast.decode_s, fast.growth_s) == (
            exact.grow_events, exact.bytes_copied, exact.decode_s, exact.growth_s)
        assert fast.alloc.footprint_peak_bytes == exact.alloc.footprint_peak_bytes
    assert first.grow_events > 0


def test_a_warm_cache_gives_the_cold_prediction() -> None:
    """The same scenarios predicted cold (cache cleared before each) and warm give identical lines."""
    scs = [_scenario(9_000, "llama-3.1-8b", {"name": "step", "step": 256}), _scenario(10_000, "llama-3.1-8b",
           {"name": "step", "step": 256}), _scenario(30_000), _scenario(31_000)]
    cold = []
    for sc in scs:
        memo.clear()
        cold.append(simulate(sc, record_events=False).to_prediction())
    memo.clear()
    warm = [simulate(sc, record_events=False).to_prediction() for sc in scs]
    assert warm == cold
    assert len(step_cache._entries) > 0
    memo.clear()
    assert len(step_cache._entries) == 0  # benchmarks time cold runs
