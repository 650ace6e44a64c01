"""The predicted peak and the range it can fall in: where frees are asynchronous (GPU backends),
and where a busy host stalls the CPU backend's host thread (``load_range``).

The event model runs three times (four with a floor, below): with the fitted free timing, with
the earliest frees (``profile.variant("low")``) and with the latest (``variant("high")``). The
predicted peak is their weighted mean (``peak_point_weight`` on the fitted timing, the rest shared by the two ends):
runs spread over free timings, so a run's mean peak lies between the three, and a scenario whose
runs split between two modes is not predicted at one of them. Their spread, widened by
``range_margin``, is the range, with two bounds (``range_min_width`` and ``range_low_share`` are
fitted, see ``docs/validation.md``):

- at most ``range_max_width`` wide (high / low): when the timings spread further, the window of
  that width with ``range_low_share`` of it (in log terms) below the point, moved inside the
  spread where it sticks out;
- at least ``range_min_width`` wide, widened ``range_low_share`` downwards and the rest upwards:
  run-to-run noise the model does not reproduce (a late handler in one growth step of one run)
  still moves a peak, and mostly upwards: frees can land much later than modelled, while how
  early they land is bounded by the command buffers' commits.

That bound is the *floor*: a fourth run in which every command buffer frees its inputs the moment
it is committed (``BackendProfile.floor_variant``). No run peaks below it but by bytes the model
does not derive, so the range's low end is kept at or above ``1 - range_floor_margin`` of it
(``floor_clamp``), and the width a centred range spent below the floor goes above it, where a late
handler puts a run.

On the CPU backend the model is the quiet host: the host thread runs ahead of the worker until
``max_active_tasks`` tasks are in flight. On a busy host the host thread is descheduled while the
worker completes tasks and frees their inputs, so a loaded run peaks lower, by a part of each step's
transient; and now and then a little higher (``load_range``, ``docs/validation.md``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kvsim.scenario.parse import Scenario
from kvsim.sim.engine import Engine
from kvsim.sim.extrapolate import play
from kvsim.sim.profile import BackendProfile
from kvsim.sim.result import TimelineRun
from kvsim.sim.timeline import Timeline, peak_run


def bound_range(
    point: Any, early: Any, late: Any, margin: float, min_width: float, max_width: float, low_share: float
) -> tuple[Any, Any]:
    """``(low, high)`` from the three simulated peaks: pure arithmetic, on numbers or numpy arrays
    (the fit bounds every scenario at once). ``low_share`` is the part of a clipped or widened
    range (in log terms) that lies below the point, or that a widening adds below the spread."""
    import numpy as np  # here, not at import: CPU predictions never need it (40 ms of start-up)

    low = np.minimum(np.minimum(point, early), late) * (1 - margin)
    high = np.maximum(np.maximum(point, early), late) * (1 + margin)
    start = np.minimum(np.maximum(point / max_width**low_share, low), high / max_width)
    too_wide = high > low * max_width
    low, high = np.where(too_wide, start, low), np.where(too_wide, start * max_width, high)
    widen = np.maximum(min_width * low / high, 1.0)
    return low / widen**low_share, high * widen ** (1 - low_share)


def floor_clamp(low: Any, high: Any, floor: Any, margin: float) -> tuple[Any, Any]:
    """``(low, high)`` moved up, its width kept, where its low end lay below ``(1 - margin) x floor``:
    numbers or numpy arrays."""
    import numpy as np

    raised = np.maximum(low, floor * (1 - margin))
    return raised, high * (raised / low)


def profile_range(profile: BackendProfile, fitted: Any, early: Any, late: Any, floor: Any = None) -> tuple[Any, Any]:
    """``bound_range`` with ``profile``'s fields, then ``floor_clamp`` where a ``floor`` is given."""
    low, high = bound_range(fitted, early, late, profile.range_margin, profile.range_min_width, profile.range_max_width,
                            profile.range_low_share)
    return (low, high) if floor is None else floor_clamp(low, high, floor, profile.range_floor_margin)


def first_eval_point(profile: BackendProfile, floor: float, fitted: float) -> float:
    """The point of a process's first eval, ``first_eval_point_share`` of the way from its floor to its fitted
    play. The CUDA profile plays that eval cold (``model_instantiate_s``, ``kvsim.sim.graph_cache``) and puts the
    point on the play (share 1): the seventeenth held-out set, predicted both ways before it was measured, had 7 of 7
    inside its ranges so, against 5 of 7 with the halfway point of a warm play (``docs/generation.md``, "CUDA: the
    graph cache, switched on")."""
    return floor + profile.first_eval_point_share * (fitted - floor)


def first_eval_range(profile: BackendProfile, point: float, floor: float) -> tuple[float, float]:
    """The range of a generation that peaks in its process's first eval: the window of ``range_max_width`` that
    puts ``model_first_eval_low_share`` of its width (in log terms) below the point (unset: ``range_low_share``, as
    every other generation's range does), its low end never under the eval's floor (``1 - range_floor_margin`` of
    it). A first eval lands anywhere from its floor (a host still building kernels and CUDA graphs lets the device
    free each command buffer as it is committed) to past its fitted play, so its range is placed on the point, not
    on the plays' spread, and on both sides of it: stored first evals peak 0.88-1.19 of their points (``docs/generation.md``, "CUDA: measured kernel
    rates and a process's first eval"; "CUDA: cold chunks"; "CUDA: a first eval's range centred on its point")."""
    share = profile.model_first_eval_low_share or profile.range_low_share
    low = max(floor * (1 - profile.range_floor_margin), point / profile.range_max_width**share)
    return low, low * profile.range_max_width


def peak_of(engine: Engine) -> int:
    return peak_run(engine.timeline).peak_bytes


@dataclass(frozen=True, slots=True)
class PeakEstimate:
    """Predicted peak bytes and the range runs fall in (all three equal where frees are synchronous)."""

    peak_bytes: int
    low_bytes: int
    high_bytes: int


def point_estimate(fitted: Any, early: Any, late: Any, weight: float) -> Any:
    """The predicted peak: ``weight`` on the fitted timing's peak, the rest split between the ends."""
    return weight * fitted + (1 - weight) * (early + late) / 2


def step_transients(timeline: Iterable[TimelineRun]) -> list[tuple[int, int]]:
    """``(settled, peak)`` bytes of every distinct step: its peak and the larger of the active bytes it
    starts from and ends at, which no run of the step peaks below (a step's peak is read at a malloc,
    after its inputs exist and before its outputs are freed). A run of identical steps gives two: its
    first step (starting from the previous run's active bytes) and the rest (starting from their own)."""
    if isinstance(timeline, Timeline):  # the fast engine's: each affine block read at its two ends
        return timeline.step_transients()
    out, before = [], 0
    for run in timeline:
        out.append((max(before, run.active_bytes), run.peak_bytes))
        if run.step_count > 1:
            out.append((run.active_bytes, run.peak_bytes))
        before = run.active_bytes
    return out


def load_low(transients: Any, share: float) -> Any:
    """The lowest peak a loaded run reaches: the largest over steps of ``settled + share x (peak - settled)``.
    ``transients`` is ``step_transients``' list, or an array of shape (..., steps, 2) (the fit's table)."""
    import numpy as np

    t = np.asarray(transients, dtype=float)
    return np.max(t[..., 0] + share * (t[..., 1] - t[..., 0]), axis=-1)


def load_range(transients: list[tuple[int, int]], point: int, profile: BackendProfile) -> tuple[int, int]:
    """CPU: ``(low, high)`` of a run's peak on a busy host (``BackendProfile.load_transient_share``,
    ``load_high_margin``). A stall frees the tasks in flight at once, so a loaded step keeps at least
    ``load_transient_share`` of its transient above its settled bytes; at most ``load_high_margin`` above
    the point. Both fields at their defaults (1 and 0): the point, as on a quiet host."""
    low = point if profile.load_transient_share >= 1 else min(math.ceil(load_low(transients, profile.load_transient_share)), point)
    return low, max(math.floor(point * (1 + profile.load_high_margin)), point)


def estimate_peak(scenario: Scenario, profile: BackendProfile, engine: Engine, exact: bool = True) -> PeakEstimate:
    """Point and range for ``scenario``; ``engine`` is its run under ``profile``'s fitted timing
    (``exact=False``: the range's runs in fast mode too, ``kvsim.sim.extrapolate``)."""
    fitted = peak_of(engine)
    if not profile.is_gpu:
        transients = step_transients(engine.timeline) if profile.load_transient_share < 1 else []  # else unread
        return PeakEstimate(fitted, *load_range(transients, fitted, profile))
    early, late = (peak_of(play(scenario, profile.variant(end), False, exact)) for end in ("low", "high"))
    floor = None
    if profile.range_floor_margin < 1:
        floor = peak_of(play(scenario, profile.floor_variant(), False, exact))
    low, high = profile_range(profile, fitted, early, late, floor)
    low, high = math.ceil(low), math.floor(high)
    point = round(point_estimate(fitted, early, late, profile.peak_point_weight))
    return PeakEstimate(min(max(point, low), high), low, high)
