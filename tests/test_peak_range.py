"""The GPU peak estimate: the bounds on the range and where the point sits (``kvsim.sim.peak_range``)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvsim.scenario.parse import parse_scenario
from kvsim.sim.engine import simulate_timeline
from kvsim.sim.peak_range import PeakEstimate, bound_range, estimate_peak, floor_clamp, peak_of, point_estimate
from kvsim.sim.profile import DEFAULTS, load_profile

peaks = st.floats(1e3, 1e10)


@given(peaks, peaks, peaks, st.floats(1.0, 1.34), st.sampled_from((0.0, 0.2, 0.5, 1.0)))
def test_range_width_is_bounded_and_holds_the_point(point: float, early: float, late: float, min_width: float,
                                                    low_share: float) -> None:
    low, high = bound_range(point, early, late, 0.005, min_width, 1.34, low_share)
    width = high / low
    assert min_width * (1 - 1e-9) <= width <= 1.34 * (1 + 1e-9)
    assert low * (1 - 1e-9) <= point <= high * (1 + 1e-9)
    spread = max(point, early, late) / min(point, early, late)
    if spread * 1.005 / 0.995 <= min_width:  # nothing clipped: the whole spread stays inside
        assert low <= min(point, early, late) and max(point, early, late) <= high


def test_widening_and_clipping_follow_the_low_share() -> None:
    low, high = bound_range(100.0, 100.0, 100.0, 0.0, 1.25, 1.34, 0.2)
    assert math.isclose(high / low, 1.25)
    assert math.isclose(math.log(100 / low) / math.log(1.25), 0.2)  # a fifth of the widening below
    low, high = bound_range(100.0, 50.0, 200.0, 0.0, 1.0, 1.34, 0.2)  # 4x spread: clipped around the point
    assert math.isclose(high / low, 1.34)
    assert math.isclose(math.log(100 / low) / math.log(1.34), 0.2)
    low, high = bound_range(100.0, 99.0, 300.0, 0.0, 1.0, 1.34, 0.5)  # the window stays inside the spread
    assert math.isclose(low, 99.0) and math.isclose(high, 99.0 * 1.34)


def test_bound_range_is_elementwise_on_arrays() -> None:
    pt, early, late = np.array([100.0, 10.0]), np.array([90.0, 10.0]), np.array([200.0, 11.0])
    low, high = bound_range(pt, early, late, 0.005, 1.1, 1.34, 0.2)
    for i in range(2):
        one = bound_range(pt[i], early[i], late[i], 0.005, 1.1, 1.34, 0.2)
        assert math.isclose(low[i], one[0]) and math.isclose(high[i], one[1])


def test_point_estimate_weights() -> None:
    assert point_estimate(10.0, 6.0, 20.0, 1.0) == 10.0
    assert point_estimate(10.0, 6.0, 20.0, 0.0) == 13.0
    assert point_estimate(10.0, 6.0, 20.0, 0.5) == 11.5


SCENARIO = {"id": "r", "model": {"n_layers": 12, "kv_heads": 8, "head_dim": 128, "dtype": "float16"},
            "policy": {"name": "step"}, "workload": {"prompt_tokens": 2000, "prefill_chunk": 512, "decode_tokens": 100}}


def test_cpu_estimate_is_the_simulated_peak_with_the_load_range_around_it() -> None:
    sc = parse_scenario(SCENARIO, "mlx-cpu")
    profile = load_profile("mlx-cpu")
    engine = simulate_timeline(sc, profile, False)
    est = estimate_peak(sc, profile, engine)
    assert est.peak_bytes == peak_of(engine)
    assert est.low_bytes < est.peak_bytes < est.high_bytes == math.floor(est.peak_bytes * (1 + profile.load_high_margin))
    quiet = replace(profile, load_transient_share=1.0, load_high_margin=0.0)  # the defaults: no range
    assert estimate_peak(sc, quiet, engine) == PeakEstimate(est.peak_bytes, est.peak_bytes, est.peak_bytes)


@pytest.mark.parametrize("weight", [1.0, 0.5])
def test_gpu_estimate_spans_the_free_timings(weight: float) -> None:
    profile = replace(DEFAULTS["mlx-cuda"], completion_lag_s=1e-4, completion_lag_low_s=0.0, completion_lag_high_s=5e-4,
                      range_min_width=1.1, peak_point_weight=weight)
    sc = parse_scenario(SCENARIO, "mlx-cuda")
    engine = simulate_timeline(sc, profile, False)
    est = estimate_peak(sc, profile, engine)
    early, late = (peak_of(simulate_timeline(sc, profile.variant(end), False)) for end in ("low", "high"))
    assert early < late  # free timing matters for this scenario
    assert est.low_bytes <= est.peak_bytes <= est.high_bytes
    assert 1.1 - 1e-6 <= est.high_bytes / est.low_bytes <= profile.range_max_width
    expected = round(point_estimate(peak_of(engine), early, late, weight))
    assert est.peak_bytes == min(max(expected, est.low_bytes), est.high_bytes)


@given(peaks, st.floats(1.0, 1.34), st.floats(0.5, 1.5), st.sampled_from((0.0, 0.02, 0.1, 1.0)))
def test_floor_clamp_moves_the_range_up_to_the_floor(low: float, width: float, floor_share: float, margin: float) -> None:
    high, floor = low * width, low * floor_share
    new_low, new_high = floor_clamp(low, high, floor, margin)
    assert new_low == max(low, floor * (1 - margin))  # raised only as far as the floor asks
    assert new_high >= high and math.isclose(new_high / new_low, width)  # moved up whole
    if margin == 1.0:
        assert (new_low, new_high) == (low, high)


SMALL = {"id": "small", "model": {"n_layers": 4, "kv_heads": 2, "head_dim": 128, "dtype": "float16"},
         "policy": {"name": "step"}, "workload": {"prompt_tokens": 520, "prefill_chunk": 200, "decode_tokens": 60},
         "consumer": "sdpa"}


@pytest.mark.parametrize("obj", [SCENARIO, SMALL], ids=["timing-bound", "structure-bound"])
def test_floor_is_the_earliest_timing(obj: dict) -> None:
    """The floor variant frees as early as commits allow: its peak is at or below every timing's."""
    profile = replace(load_profile("mlx-cuda"), completion_lag_high_s=5e-4)
    sc = parse_scenario(obj, "mlx-cuda")
    floor = peak_of(simulate_timeline(sc, profile.floor_variant(), False))
    timings = [peak_of(simulate_timeline(sc, p, False)) for p in (profile, profile.variant("low"), profile.variant("high"))]
    assert floor <= min(timings)


def test_floor_margin_moves_the_gpu_range_up() -> None:
    """Where the timings sit on the floor, a centred range reaches below it; the clamp moves it up."""
    profile = replace(load_profile("mlx-cuda"), range_floor_margin=1.0)
    sc = parse_scenario(SMALL, "mlx-cuda")
    engine = simulate_timeline(sc, profile, False)
    floor = peak_of(simulate_timeline(sc, profile.floor_variant(), False))
    free = estimate_peak(sc, profile, engine)
    clamped = estimate_peak(sc, replace(profile, range_floor_margin=0.02), engine)
    assert free.low_bytes < floor * 0.98  # the centred range reaches below the floor
    assert clamped.low_bytes == math.ceil(floor * 0.98) and clamped.high_bytes > free.high_bytes
    assert clamped.peak_bytes == free.peak_bytes  # the point does not move
    assert math.isclose(clamped.high_bytes / clamped.low_bytes, free.high_bytes / free.low_bytes, rel_tol=1e-6)


def test_a_first_eval_range_is_placed_on_its_point() -> None:
    """``first_eval_range``: the window of ``range_max_width`` with ``model_first_eval_low_share`` of it below the
    point (the CUDA profile's 0.5: centred; unset, the generation's ``range_low_share``), whatever the plays' spread;
    a floor whose reach lies above that low end lifts the window, width kept."""
    from kvsim.generation.schedule import generation_profile
    from kvsim.sim.peak_range import first_eval_range

    p = generation_profile(load_profile("mlx-cuda"))
    width, share, margin = p.range_max_width, p.model_first_eval_low_share, p.range_floor_margin
    low, high = first_eval_range(p, 13.40, 11.43)
    assert low == pytest.approx(13.40 / width**share) and high == pytest.approx(low * width)
    assert share == 0.5 and 13.40 / low == pytest.approx(high / 13.40)  # centred on the point
    low, _ = first_eval_range(replace(p, model_first_eval_low_share=0.0), 13.40, 11.43)
    assert low == pytest.approx(13.40 / width**0.375)  # the generation's share, as a later eval's range takes it
    low, high = first_eval_range(p, 13.40, 12.90)  # the floor's reach bounds the low end
    assert low == pytest.approx(12.90 * (1 - margin)) and high == pytest.approx(low * width) and low <= 13.40
