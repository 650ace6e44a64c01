"""Fit a backend profile's timing parameters (``FITTED_FIELDS``) to calibration data (train split).

Every simulated time (host per node and per kernel, device per dispatch and per byte, completion
lag) scales together, and the order of mallocs and frees, hence every peak, is unchanged when all
of them are multiplied by one factor. The fit uses that split:

1. **Shape** (CPU): the ratios of host, kernel, dispatch and byte times, Nelder-Mead in log-space
   from the current profile (plus a few random starts), minimising mean |peak error| + 0.1 max
   + ``DECODE_WEIGHT`` x the median decode-step time error left after the best common scale.
2. **Free timing** (GPU): the point on a grid (device bandwidth, completion lag, host cost of
   system allocations; graph nodes per kernel is an axis of one value, 1) minimising |error| vs the runs' mean peak, then the earliest / latest
   timings, ``range_min_width``, ``range_low_share`` and ``peak_point_weight`` (``fit_lag``); then the host time between
   a ``lowpeak`` cache's barrier evals (``fit_barrier``). Both move host time, so they come before
   the time model. Last of the peak fields, how far below the structural floor the range may
   reach (``fit_floor_margin``).
   **Load** (CPU): the share of each step's transient a run on a busy host still reaches and the margin
   above the point (``fit_load``); the range only, no peak or time moves.
3. **Time model**: a factor on the simulated eval time and a cost per graph array, minimising the
   mean |log(measured / simulated)| decode-step time (``fit_scale``; peaks do not move).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import lzma
import math
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.calibration.validate import (
    Observation,
    at_host_speed,
    compare,
    decode_step_s,
    pct_error,
    predict,
    reference_probe_s,
    summarise,
)
from kvsim.core.paths import REPO_DIR
from kvsim.sim.engine import simulate_timeline
from kvsim.sim.peak_range import (
    bound_range,
    floor_clamp,
    load_low,
    peak_of,
    point_estimate,
    profile_range,
    step_transients,
)
from kvsim.sim.profile import FITTED_FIELDS, BackendProfile, profile_from_file, save_profile

TIME_FIELDS = ("host_node_s", "host_kernel_s", "device_dispatch_s")
LAG_GRID_S = (0.0, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3)
# CUDA graph nodes per kernel: 1. The model counts MLX's own nodes per op (reductions' copies and second
# passes, join nodes, two-pass attention), and tests/test_cuda_graphs.py checks its command buffers
# against the graphs an H200 committed; a free factor here would fit run-to-run noise to a count.
NODES_GRID = (1.0,)
MALLOC_GRID_BYTES_PER_S = (0.0, 1e11, 3e10, 1.5e10, 1e10, 5e9)  # 0: system allocations cost no host time
# effective device bytes per second of the cache's copies: how long the GPU runs behind the host
BANDWIDTH_GRID_BYTES_PER_S = (2e12, 1e12, 5e11, 2.5e11)
MIN_WIDTH_GRID = (1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.34)  # candidates for range_min_width
LOW_SHARE_GRID = (0.2, 0.3, 0.4, 0.5)  # candidates for range_low_share (ties keep the smallest)
POINT_WEIGHT_GRID = (1.0, 0.75, 0.5, 0.25, 0.0)  # candidates for peak_point_weight
GPU_MAX_WEIGHT = 0.5  # GPU point loss: mean + half the max |error| (the targets are 5% median, 12% max)
# candidates for range_floor_margin; 1.0 is no floor (ties keep the smallest: the floor is a bound)
FLOOR_MARGIN_GRID = (0.0, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 1.0)
# candidates for load_transient_share, 0..0.5: a loaded growth step peaks at one of the peaks the model gives with
# the host thread stalled before one op (host_stall_op), and over every stall position no step analysed kept less
# than half of its transient (docs/validation.md); loaded train runs, which sample a few positions, sit higher
LOAD_SHARE_GRID = tuple(round(0.02 * i, 2) for i in range(26))
LOAD_FIELDS = ("load_transient_share", "load_high_margin")
LOAD_ROBUST_SHARE = 0.1  # tie-break: runs still inside when the low end moves this share of the way to the point
LOAD_MARGIN_GRID = (0.0, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05)  # candidates for load_high_margin
EVAL_CALL_GRID_S = (0.0, 2e-5, 5e-5, 1e-4, 2e-4)  # candidates for host_eval_call_s (includes 0.0)
ROBUST_SHRINK = 1.02  # tie-break: runs still inside when both range ends move 2% inwards
RANDOM_STARTS = 8
DECODE_WEIGHT = 0.1
Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class FitResult:
    """The fitted profile, the train rows it was judged on, and what the fit cost."""

    profile: BackendProfile
    train_rows: list[dict[str, Any]]
    evaluations: int
    seconds: float


def log_times(profile: BackendProfile) -> np.ndarray:
    """``ln`` of the four time parameters (seconds per byte for the bandwidth)."""
    return np.log([*(getattr(profile, f) for f in TIME_FIELDS), 1.0 / profile.device_bytes_per_s])


def with_log_times(profile: BackendProfile, x: np.ndarray) -> BackendProfile:
    values = np.exp(x)
    return replace(profile, **dict(zip(TIME_FIELDS, map(float, values[:3]))), device_bytes_per_s=float(1.0 / values[3]))


def point_peaks(observations: list[Observation], profile: BackendProfile) -> list[int]:
    """Simulated peak of each observation's scenario (point prediction, no lag range)."""
    return [peak_of(simulate_timeline(o.scenario, profile, False)) for o in observations]


def peak_loss(observations: list[Observation], peaks: Any, max_weight: float = 0.1) -> float:
    """Mean |peak error| (%) plus ``max_weight`` times the max, against each scenario's mean run."""
    errs = [abs(pct_error(p, o.mean_peak_bytes)) for o, p in zip(observations, peaks)]
    return statistics.fmean(errs) + max_weight * max(errs)


def decode_log_ratios(observations: list[Observation], simulated_s: list[float | None]) -> list[float]:
    """``ln(measured / simulated)`` decode-step time, where both exist."""
    return [math.log(o.decode_step_s / s) for o, s in zip(observations, simulated_s) if o.decode_step_s and s]


def decode_loss(log_ratios: list[float]) -> float:
    """Median |decode-step error| (%, in log terms) once the best common scale is applied."""
    if not log_ratios:
        return 0.0
    centre = statistics.median(log_ratios)
    return 100.0 * statistics.median(abs(r - centre) for r in log_ratios)


def simulate_all(observations: list[Observation], profile: BackendProfile) -> tuple[list[int], list[float | None]]:
    """Point peak and decode-step seconds of every observation's scenario."""
    peaks, decodes = [], []
    for o in observations:
        engine = simulate_timeline(o.scenario, profile, False)
        peaks.append(peak_of(engine))
        decodes.append(decode_step_s(engine))
    return peaks, decodes


def fit_shape(observations: list[Observation], profile: BackendProfile, max_evals: int, log: Log) -> tuple[BackendProfile, int]:
    """Fit the time ratios to peaks and to decode-step times (up to a common scale).

    ``host_node_s`` stays fixed here; ``fit_scale`` sets the scale afterwards. The loss is
    ``peak_loss + DECODE_WEIGHT * decode_loss``, so peaks come first.
    """
    from scipy.optimize import minimize

    x_base = log_times(profile)
    memo: dict[tuple[float, ...], float] = {}

    def loss(y: np.ndarray) -> float:
        key = tuple(np.round(y, 3))
        if key not in memo:
            x = np.concatenate([x_base[:1], y])
            peaks, decodes = simulate_all(observations, with_log_times(profile, x))
            memo[key] = peak_loss(observations, peaks) + DECODE_WEIGHT * decode_loss(decode_log_ratios(observations, decodes))
        return memo[key]

    y0 = x_base[1:]
    best_y, best = y0, loss(y0)
    log(f"shape: start loss {best:.4f} (mean |peak err| % + 0.1 max + {DECODE_WEIGHT} x median |decode err| %)")
    rng = np.random.default_rng(0)
    for y in y0 + rng.uniform(-3.0, 3.0, size=(RANDOM_STARTS, y0.size)):
        if len(memo) >= max_evals // 3:
            break
        if (value := loss(y)) < best - 1e-9:
            best_y, best = y, value
    budget = max(max_evals - len(memo), 0)
    if budget > y0.size + 1:
        simplex = np.vstack([best_y, best_y + np.eye(y0.size)])
        res = minimize(loss, best_y, method="Nelder-Mead",
                       options={"maxfev": budget, "initial_simplex": simplex, "xatol": 0.02, "fatol": 1e-4})
        if res.fun < best - 1e-9:
            best_y, best = res.x, float(res.fun)
    log(f"shape: best loss {best:.4f} after {len(memo)} evaluations")
    return with_log_times(profile, np.concatenate([x_base[:1], best_y])), len(memo)


def fit_scale(observations: list[Observation], profile: BackendProfile, log: Log) -> BackendProfile:
    """The time model: decode step = ``scale`` × the simulated eval time + arrays built ×
    ``python_array_s``. Both are chosen to minimise the mean |log(measured / simulated)| (a median would
    let the few compute-bound scenarios go unfitted)."""
    from scipy.optimize import minimize

    eval_s = simulate_all(observations, replace(profile, python_array_s=0.0, eval_time_scale=1.0))[1]
    unit = 1e-6
    with_build = simulate_all(observations, replace(profile, python_array_s=unit, eval_time_scale=1.0))[1]
    rows = [
        (o.decode_step_s, e, (b - e) / unit)
        for o, e, b in zip(observations, eval_s, with_build)
        if o.decode_step_s and e is not None and b is not None
    ]
    if not rows:
        log("scale: no decode-step times in the data; times left as they are")
        return profile

    def loss(y: np.ndarray) -> float:
        a, b = np.exp(y)
        return statistics.fmean(abs(math.log(m / (a * e + b * n))) for m, e, n in rows)

    starts = [np.log([1.0, 1e-6]), np.log([0.1, 3e-6]), np.log([1.0, 1e-7]), np.log([0.01, 5e-6])]
    best = min((minimize(loss, y, method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-5}) for y in starts),
               key=lambda r: r.fun)
    y = best.x
    centre = statistics.median(math.log(m / (np.exp(y[0]) * e + np.exp(y[1]) * n)) for m, e, n in rows)
    if loss(y + centre) <= best.fun:  # scale both terms so the median ratio is exactly 1
        y = y + centre
    factor, per_array_s = (float(v) for v in np.exp(y))
    log(f"time model: eval time x{factor:.4g}, {per_array_s * 1e6:.3g} us per graph array "
        f"(mean |log ratio| {loss(y):.3f} over {len(rows)} scenarios)")
    return replace(profile, eval_time_scale=factor, python_array_s=per_array_s)


def peak_table(observations: list[Observation], profiles: list[BackendProfile]) -> np.ndarray:
    """Point peaks of every observation (columns) under every profile (rows), on all cores."""
    workers = min(os.cpu_count() or 1, len(profiles))
    if workers <= 1 or len(profiles) * len(observations) < 64:
        return np.array([point_peaks(observations, p) for p in profiles], dtype=float)
    with ProcessPoolExecutor(workers) as pool:
        return np.array(list(pool.map(point_peaks, itertools.repeat(observations), profiles, chunksize=4)), dtype=float)


def run_matrix(observations: list[Observation]) -> np.ndarray:
    """Every observation's run peaks, one row each, padded with NaN."""
    runs = np.full((len(observations), max(len(o.peaks_bytes) for o in observations)), np.nan)
    for i, o in enumerate(observations):
        runs[i, : len(o.peaks_bytes)] = o.peaks_bytes
    return runs


def runs_inside(runs: np.ndarray, low: np.ndarray, high: np.ndarray, shrink: float = 1.0) -> int:
    """How many runs lie in their rows' ranges (rounded as ``estimate_peak`` rounds), with both ends
    moved ``shrink``-fold inwards."""
    return int(np.sum((runs >= np.ceil(low * shrink)[:, None]) & (runs <= np.floor(high / shrink)[:, None])))


@dataclass(frozen=True, slots=True)
class _LagCandidate:
    """The best free timing at one device bandwidth: grid indices, range width, weight and losses."""

    key: tuple[float, int, int]  # (point-estimate loss, -runs inside, -runs inside with room to spare)
    point: int
    lo: int
    hi: int
    min_width: float
    low_share: float
    weight: float
    median_width: float


def fit_lag(observations: list[Observation], profile: BackendProfile, log: Log) -> tuple[BackendProfile, int]:
    """GPU: when frees land relative to the host, from a grid over the device bandwidth, graph nodes
    per kernel (``NODES_GRID``: 1 only), completion lag and the host cost of system allocations. Every grid value is tried as
    the point timing (``_candidate``): around it, the range takes a grid value with frees no later
    than the point's on every axis (as many or more graph nodes per kernel, no more lag, costlier
    system allocations) and one with frees no earlier, plus a ``range_min_width`` and
    ``range_low_share`` (how much of a widening goes below the point), and the weight
    ``peak_point_weight`` of the point in the predicted peak. The bandwidth (a device property,
    shared by the three timings) and point kept are those whose predicted peaks have the least loss,
    then whose range holds the most runs: the predicted peak is what is checked, so it is judged
    whole, not by the point timing's own peaks (``docs/validation.md``)."""
    grid = [(n, lag, rate) for n in NODES_GRID for lag in LAG_GRID_S for rate in MALLOC_GRID_BYTES_PER_S]

    def timed(bw: float, n: float, lag: float, rate: float) -> BackendProfile:
        return replace(profile, device_bytes_per_s=bw, graph_nodes_per_kernel=n, completion_lag_s=lag,
                       host_malloc_bytes_per_s=rate)

    runs = run_matrix(observations)

    def best_at(table: np.ndarray) -> _LagCandidate:
        return min((_candidate(observations, runs, table, grid, point, profile) for point in range(len(grid))),
                   key=lambda c: (c.key, c.point))

    candidates = {}
    for bw in BANDWIDTH_GRID_BYTES_PER_S:
        candidates[bw] = best_at(peak_table(observations, [timed(bw, *g) for g in grid]))
        log(f"free timing at {bw / 1e9:g} GB/s: predicted-peak loss {candidates[bw].key[0]:.3f}, "
            f"range holds {-candidates[bw].key[1]} train runs")
    bw = min(candidates, key=lambda b: candidates[b].key)
    c = candidates[bw]

    def show(g: int) -> str:
        n, lag, rate = grid[g]
        return f"{n:g} nodes/kernel, lag {lag * 1e6:.3g} us, malloc {rate / 1e9:.3g} GB/s"

    log(f"free timing: device {bw / 1e9:g} GB/s; point {show(c.point)}; range {show(c.lo)} .. {show(c.hi)}, "
        f"at least {c.min_width:g}x wide ({c.low_share:g} of a widening below), holds {-c.key[1]}/{int(np.sum(~np.isnan(runs)))} train runs, "
        f"median width {c.median_width:.3f}x; predicted peak {c.weight:g} x the point + the rest x the ends' mean "
        f"(loss {c.key[0]:.3f})")
    (n_lo, lag_lo, rate_lo), (n_hi, lag_hi, rate_hi) = grid[c.lo], grid[c.hi]
    fitted = replace(
        timed(bw, *grid[c.point]), range_min_width=c.min_width, range_low_share=c.low_share, peak_point_weight=c.weight,
        graph_nodes_per_kernel_low=n_lo, completion_lag_low_s=lag_lo, host_malloc_bytes_per_s_low=rate_lo,
        graph_nodes_per_kernel_high=n_hi, completion_lag_high_s=lag_hi, host_malloc_bytes_per_s_high=rate_hi,
    )
    return fitted, len(BANDWIDTH_GRID_BYTES_PER_S) * len(grid) * len(observations)


def _candidate(observations: list[Observation], runs: np.ndarray, table: np.ndarray,
               grid: list[tuple[float, float, float]], point: int, profile: BackendProfile) -> _LagCandidate:
    """The range and weight around one point timing (``fit_lag``): the ends and minimum width whose
    range (``kvsim.sim.peak_range.bound_range``) holds the most training runs, then the most with
    ``ROBUST_SHRINK`` room to spare at both ends, then the widest minimum width (the spread the
    training hosts showed is a lower bound on a new host's), then the narrowest median range; then
    the weight whose predicted peaks have the least loss."""

    n_pt, lag_pt, rate_pt = grid[point]
    cost_pt = _host_cost(rate_pt)
    earlier = [g for g, (n, lag, rate) in enumerate(grid) if n >= n_pt and lag <= lag_pt and _host_cost(rate) >= cost_pt]
    later = [g for g, (n, lag, rate) in enumerate(grid) if n <= n_pt and lag >= lag_pt and _host_cost(rate) <= cost_pt]
    best: tuple[tuple[int, int, float, float], int, int, float, float] | None = None  # key, lo, hi, width, share
    for lo, hi, min_width, share in itertools.product(earlier, later, MIN_WIDTH_GRID, LOW_SHARE_GRID):
        low, high = bound_range(table[point], table[lo], table[hi], profile.range_margin, min_width,
                                profile.range_max_width, share)
        key = (-runs_inside(runs, low, high), -runs_inside(runs, low, high, ROBUST_SHRINK), -min_width,
               float(np.median(high / low)))
        if best is None or key < best[0]:
            best = (key, lo, hi, min_width, share)
    assert best is not None
    (neg_inside, neg_robust, _, median_width), lo, hi, min_width, share = best
    point_loss = {w: peak_loss(observations, point_estimate(table[point], table[lo], table[hi], w), GPU_MAX_WEIGHT)
                  for w in POINT_WEIGHT_GRID}
    weight = min(POINT_WEIGHT_GRID, key=point_loss.__getitem__)
    return _LagCandidate((point_loss[weight], neg_inside, neg_robust), point, lo, hi, min_width, share, weight,
                         median_width)


def fit_barrier(observations: list[Observation], profile: BackendProfile, log: Log) -> tuple[BackendProfile, int]:
    """GPU: the host time between barrier ``mx.eval`` calls (``host_eval_call_s``), from a grid,
    minimising the predicted-peak loss over the scenarios that grow behind barriers (``lowpeak``).
    Frees a completion handler still owes land in that time, before the next buffer grows."""
    barrier = [o for o in observations if o.scenario.policy_name == "lowpeak"]
    if not barrier:
        log("barrier: no lowpeak scenarios in the train split; host_eval_call_s left as it is")
        return profile, 0

    def loss(seconds: float) -> float:
        timed = replace(profile, host_eval_call_s=seconds)
        return peak_loss(barrier, [predict(o.scenario, timed).peak_bytes for o in barrier], GPU_MAX_WEIGHT)

    losses = {s: loss(s) for s in EVAL_CALL_GRID_S}
    best = min(EVAL_CALL_GRID_S, key=lambda s: (losses[s], s))
    log(f"barrier: {best * 1e6:.3g} us of host time between barrier evals (loss {losses[best]:.3f} over "
        f"{len(barrier)} lowpeak scenarios; {losses[0.0]:.3f} with none)")
    return replace(profile, host_eval_call_s=best), 3 * len(EVAL_CALL_GRID_S) * len(barrier)


def fit_floor_margin(observations: list[Observation], profile: BackendProfile, log: Log) -> tuple[BackendProfile, int]:
    """GPU: how far below the structural floor (``BackendProfile.floor_variant``) the range's low end
    may reach (``range_floor_margin``, from ``FLOOR_MARGIN_GRID``): the margin whose clamped range
    holds the most training runs, then the most with ``ROBUST_SHRINK`` room to spare, then the
    smallest. The floor bounds how early frees land; what a margin covers is bytes the model does not
    derive, so of equal margins the tightest leaves the most of the range above the floor. The
    point and the other range fields are already fitted; the clamp moves only the range."""
    variants = [profile, profile.variant("low"), profile.variant("high"), profile.floor_variant()]
    fitted, early, late, floor = peak_table(observations, variants)
    low, high = profile_range(profile, fitted, early, late)
    runs = run_matrix(observations)

    def held(margin: float) -> tuple[int, int]:
        lo, hi = floor_clamp(low, high, floor, margin)
        return runs_inside(runs, lo, hi), runs_inside(runs, lo, hi, ROBUST_SHRINK)

    counts = {m: held(m) for m in FLOOR_MARGIN_GRID}
    best = min(FLOOR_MARGIN_GRID, key=lambda m: (-counts[m][0], -counts[m][1], m))
    log(f"floor: the range reaches at most {best:.1%} below the structural floor and holds {counts[best][0]} "
        f"train runs ({counts[1.0][0]} with no floor)")
    return replace(profile, range_floor_margin=best), len(variants) * len(observations)


def transient_table(observations: list[Observation], profile: BackendProfile) -> np.ndarray:
    """``step_transients`` of every observation's scenario, shape (scenarios, steps, 2), padded with zeros
    (a padded step's low end is 0, below any real one)."""
    rows = [step_transients(simulate_timeline(o.scenario, profile, False).timeline) for o in observations]
    table = np.zeros((len(rows), max(map(len, rows)), 2))
    for i, r in enumerate(rows):
        table[i, : len(r)] = r
    return table


def fit_load(observations: list[Observation], profile: BackendProfile, log: Log) -> tuple[BackendProfile, int]:
    """CPU: the range runs on a busy host fall in (``load_transient_share``, ``load_high_margin``), from grids:
    the pair whose range (``kvsim.sim.peak_range.load_range``) holds the most training runs, then the most
    with its low end raised by ``LOAD_ROBUST_SHARE`` of its distance to the point (a loaded step peaks
    wherever the host thread happened to stall, and the train runs saw a few of those places: the share
    keeps room below the lowest), then the narrowest (the largest share, then the smallest margin). Only the
    range moves: the point is the quiet host's peak."""
    table = transient_table(observations, profile)
    point = table[:, :, 1].max(axis=1)
    runs = run_matrix(observations)
    best: tuple[tuple[int, int, float, float], float, float] | None = None
    for share, margin in itertools.product(LOAD_SHARE_GRID, LOAD_MARGIN_GRID):
        low = np.minimum(np.ceil(load_low(table, share)), point) if share < 1 else point
        high = point * (1 + margin)
        robust_low = low + LOAD_ROBUST_SHARE * (point - low)
        key = (-runs_inside(runs, low, high), -runs_inside(runs, robust_low, high), -share, margin)
        if best is None or key < best[0]:
            best = (key, share, margin)
    assert best is not None
    (neg_inside, _, _, _), share, margin = best
    quiet = runs_inside(runs, point, point)
    log(f"load: runs keep {share:g} of each step's transient and peak at most {margin:.2%} above the point; "
        f"the range holds {-neg_inside}/{int(np.sum(~np.isnan(runs)))} train runs ({quiet} at the point itself)")
    return replace(profile, load_transient_share=share, load_high_margin=margin), len(observations)


def refit_load(observations: list[Observation], profile_path: Path, data_files: list[str], log: Log) -> Path:
    """``kvsim fit --load-only``: ``fit_load`` on the train split of ``observations``, every other field of the
    profile at ``profile_path`` kept (no peak or time moves); the profile is rewritten atomically with the
    two fields and a ``fit.load`` block (data files, train runs in range)."""
    doc = json.loads(profile_path.read_text(encoding="utf-8"))
    profile = profile_from_file(profile_path, doc["profile"]["name"])
    if profile.is_gpu:
        raise ValueError(f"--load-only: the load range is the CPU backend's, got {profile.name}")
    train = [o for o in observations if o.split == "train"]
    if not train:
        raise ValueError("data: no train-split records to fit")
    fitted, _ = fit_load(train, profile, log)
    ranges = [predict(o.scenario, fitted) for o in train]
    inside = sum(r.peak_low_bytes <= p <= r.peak_high_bytes for o, r in zip(train, ranges) for p in o.peaks_bytes)
    fit = dict(doc.get("fit", {}))
    fit["fitted"] = {**fit.get("fitted", {}), **{f: getattr(fitted, f) for f in LOAD_FIELDS}}
    fit["load"] = {
        "data_files": [_file_info(path) for path in data_files],
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "method": "fit_load on the train split: the most runs in range, then the most with room below, then the tightest",
        "train_runs": sum(len(o.peaks_bytes) for o in train), "train_runs_in_range": inside,
    }
    return save_profile(fitted, {"fit": fit}, profile_path.parent)


def _host_cost(bytes_per_s: float) -> float:
    """Host seconds per byte of a system allocation (rate 0 means free)."""
    return 0.0 if bytes_per_s == 0 else 1.0 / bytes_per_s


def fit_profile(
    observations: list[Observation], profile: BackendProfile, *, max_evals: int = 120, log: Log = lambda _: None
) -> FitResult:
    """Fit ``profile``'s ``FITTED_FIELDS`` to the train split of ``observations``."""
    t0 = time.perf_counter()
    train = [o for o in observations if o.split == "train"]
    if not train:
        raise ValueError("data: no train-split records to fit")
    probe_s = reference_probe_s(train)  # times of runs on other hosts are put in this host's time
    profile = replace(profile, host_probe_s=probe_s)
    train = [at_host_speed(o, probe_s) for o in train]
    evaluations = 0
    if not profile.is_gpu:
        profile, evaluations = fit_shape(train, profile, max_evals, log)
        profile, load_evals = fit_load(train, profile, log)
        evaluations += load_evals
    if profile.is_gpu:  # free timing moves host time (system allocations), so it goes before the time model
        profile, lag_evals = fit_lag(train, profile, log)
        profile, barrier_evals = fit_barrier(train, profile, log)
        profile, floor_evals = fit_floor_margin(train, profile, log)
        evaluations += lag_evals + barrier_evals + floor_evals
    profile = fit_scale(train, profile, log)
    profile = replace(profile, status="fitted")
    rows = [compare(o, predict(o.scenario, profile), profile.is_gpu, probe_s) for o in train]
    return FitResult(profile, rows, evaluations, time.perf_counter() - t0)


def fit_metadata(result: FitResult, headers: list[dict[str, Any]], data_files: list[str]) -> dict[str, Any]:
    """The ``fit`` block stored beside the profile: provenance, fitted values, train residuals."""
    p = result.profile
    keep = ("id", "runs", "peak_err_pct", "final_err_pct", "decode_err_pct", "runs_in_range", "range_width")
    return {"fit": {
        "backend": p.name,
        "mlx_version": p.mlx_version,
        "mlx_lm_versions": sorted({str(h.get("mlx_lm_version")) for h in headers}),
        "devices": sorted({json_text(h.get("device", {}).get("device", {})) for h in headers}),
        "data_files": [_file_info(path) for path in data_files],
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "method": "log-space Nelder-Mead on peak shape (CPU), bandwidth x free-timing grid (GPU), time model last; "
                  "train split only",
        "fitted": {f: getattr(p, f) for f in FITTED_FIELDS},
        "evaluations": result.evaluations,
        "seconds": round(result.seconds, 1),
        "train_summary": summarise(result.train_rows, p.is_gpu),
        "train_residuals": [{k: row[k] for k in keep if k in row} for row in result.train_rows],
    }}


def _file_info(path: str) -> dict[str, Any]:
    """Path, SHA-256 and header creation time of one calibration file (a moved copy still matches)."""
    import hashlib
    from pathlib import Path

    raw = Path(path).read_bytes()
    text = lzma.decompress(raw) if str(path).endswith(".xz") else raw  # data/cpu-load ships .jsonl.xz
    header = json.loads(text.split(b"\n", 1)[0])
    root = REPO_DIR
    resolved = Path(path).resolve()
    shown = str(resolved.relative_to(root)) if resolved.is_relative_to(root) else path
    return {"path": shown, "sha256": hashlib.sha256(raw).hexdigest(), "created_utc": header.get("created_utc")}


def json_text(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)
