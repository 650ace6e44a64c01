"""A generation traced once and replayed under each timing equals a separate play under each (issue #17)."""

from __future__ import annotations

import pytest

from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.measure import scale_config
from kvsim.generation.model import build_model
from kvsim.generation.schedule import CLEAR, REPEAT, Workload, play, record, replay
from kvsim.sim.profile import load_profile

SMALL = {"hidden_size": 256, "intermediate_size": 768, "vocab_size": 8192}
WORKLOAD = Workload(1024, 300, prefill_step_size=256)
"""Four prefill chunks (one advanced untraced), a cache growth at 1,280 rows and the clear at 256 tokens."""


def _built(name: str):
    return build_model(ModelConfig(scale_config(load_model_config(name).config, 2, **SMALL), name))


@pytest.mark.parametrize("backend", ["mlx-cpu", "mlx-cuda", "mlx-metal"])
def test_replays_of_one_trace_equal_separate_plays(backend: str) -> None:
    """Every eval's peak, held state, cache and footprint, and the buffer cache left at the end, under the
    fitted timing and (GPU) its low, high and floor variants; the floor is traced with an infinite device rate
    (matmul flops left out of work bytes) when played alone, yet its replay of the shared trace is identical."""
    built = _built("qwen3-0.6b")
    profile = load_profile(backend)
    timings = [profile]
    if profile.is_gpu:
        timings += [profile.variant("low"), profile.variant("high"), profile.floor_variant()]
    recorded = record(built, WORKLOAD, profile)
    assert CLEAR in recorded.events and REPEAT in recorded.events
    for timing in timings:
        shared = replay(recorded, timing)
        alone, kv = play(built, WORKLOAD, timing)
        assert len(shared.evals) >= 4
        assert shared.evals == alone.evals
        assert (shared.carry.cache_bytes, shared.carry.repeat_footprint_bytes) == \
            (alone.carry.cache_bytes, alone.carry.repeat_footprint_bytes)
        assert recorded.kv_bytes == kv


def test_a_trace_replays_only_under_its_own_trace_settings() -> None:
    """A CUDA trace (CUDA's fused attention, its matmul rate) is not Metal's, nor the CPU's."""
    built = _built("qwen3-0.6b")
    recorded = record(built, Workload(64, 2), load_profile("mlx-cuda"))
    for backend in ("mlx-metal", "mlx-cpu"):
        with pytest.raises(ValueError, match="trace settings"):
            replay(recorded, load_profile(backend))


def test_a_peaking_first_eval_is_predicted_between_its_floor_and_its_fitted_play() -> None:
    """``first_eval_point_share``: where the process's first eval peaks, the point lies that share of the way
    from the eval's floor to its fitted play, unless a later eval's point is higher; its range is the window of
    ``range_max_width`` placed on that point, its low end never under the floor's reach (``first_eval_range``).
    Where a later eval peaks, the first eval's point does not enter."""
    from dataclasses import replace

    from kvsim.generation.predict import gpu_peak
    from kvsim.generation.schedule import EvalPeak, generation_profile

    def evals(*gb: float) -> list[EvalPeak]:
        return [EvalPeak("prefill", 0, 0, int(x * 1e9), 0, 0) for x in gb]

    p = replace(load_profile("mlx-cuda"), first_eval_point_share=0.5)
    fitted, early, late, floor = evals(12.0, 10.5), evals(11.0, 10.5), evals(15.0, 10.5), evals(9.0, 10.2)
    point, low, high = gpu_peak(p, fitted, early, late, floor)
    assert point == int(10.5e9)  # 9 + 0.5 x (12 - 9)
    g = generation_profile(p)
    share = g.model_first_eval_low_share
    assert low == int(10.5e9 / g.range_max_width**share) and low <= point <= high  # over 0.98 x 9e9
    assert high == int(low * g.range_max_width)
    reached = gpu_peak(p, fitted, early, late, evals(10.9, 10.2))[1]
    assert reached == int(10.9e9 * (1 - p.range_floor_margin))  # the floor's reach lifts the window
    later_first = gpu_peak(p, fitted, early, evals(15.0, 13.0), floor)[0]  # a later eval's point is higher
    assert later_first == int(0.25 * 10.5e9 + 0.375 * (10.5e9 + 13.0e9))
    off = gpu_peak(replace(p, first_eval_point_share=0.0), fitted, early, late, floor)[0]
    assert off == int(0.25 * 12e9 + 0.375 * (11e9 + 15e9))  # point_estimate, as for any other eval
    later = gpu_peak(p, evals(12.0, 13.0), evals(11.0, 12.0), evals(15.0, 16.0), floor)[0]
    assert later == gpu_peak(replace(p, first_eval_point_share=0.0), evals(12.0, 13.0), evals(11.0, 12.0),
                             evals(15.0, 16.0), floor)[0]
