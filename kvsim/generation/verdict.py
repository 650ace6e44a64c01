"""Does a generation fit a device, how long a context fits, and which settings make it fit.

A cannot-fit is a verdict, never an error. The peak is held against the device's GPU working set (past
it a Mac pages or MLX's wired memory stops covering the model) and MLX's memory limit (past it, ``eval``
waits for memory that never comes, or fails). The resident footprint (weights, the largest active + cache,
the process's baseline) is held against the device's memory: on a Mac the unified RAM, on a GPU its memory
(MLX's buffers live there; the process baseline is host memory, not counted). On Metal, mlx-lm's
``stream_generate`` sets the wired limit to the recommended working set (``mlx_lm/utils.py``
``maybe_set_recommended_wired_limit``), and cached buffers stay in the residency set until released, so the
OS's wired figure is about ``min(active + cache, working set)`` (``mlx/backend/metal/resident.cpp``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

from kvsim.generation.config import ModelConfig
from kvsim.generation.devices import Device
from kvsim.generation.model import BuiltModel, build_model
from kvsim.generation.predict import Prediction, gpu_peak, policy_cache
from kvsim.generation.schedule import GenerationTrace, Workload, record, replay
from kvsim.sim.peak_range import point_estimate
from kvsim.sim.profile import load_profile

FITS, OVER_WORKING_SET, OVER_LIMIT = "fits", "over the GPU working set", "over MLX's memory limit"
CONTEXT_STEP_TOKENS = 1024
"""Granularity of the longest-context search."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A predicted peak against one device."""

    device: Device
    peak_bytes: int
    status: str
    """``fits``, ``over the GPU working set`` or ``over MLX's memory limit``."""
    resident_bytes: int = 0
    """The footprint held against the device's memory (0: not given): MLX's weights + active + cache at
    most, plus the process baseline where that shares the memory (a Mac, the CPU)."""
    wired_bytes: int | None = None
    """Metal: the wired figure at most, ``min(footprint, working set)``; ``None`` elsewhere."""
    high_bytes: int = 0
    """The top of the range a GPU run peaks in (``Prediction.peak_high_bytes``); 0: no range given."""

    @property
    def resident_fits(self) -> bool:
        return self.resident_bytes <= self.device.memory_bytes

    @property
    def fits(self) -> bool:
        return self.status == FITS

    @property
    def range_over_working_set(self) -> bool:
        """The peak fits, but the top of its range does not: a run may peak over the working set."""
        return self.fits and self.high_bytes > self.device.working_set_bytes

    @property
    def headroom_bytes(self) -> int:
        """Working set minus peak (negative: by how much it is over)."""
        return self.device.working_set_bytes - self.peak_bytes

    def to_json(self) -> dict[str, Any]:
        d = self.device
        out = {"device": d.name, "working_set_bytes": d.working_set_bytes, "memory_limit_bytes": d.memory_limit_bytes,
               "status": self.status, "fits": self.fits, "headroom_bytes": self.headroom_bytes,
               "memory_bytes": d.memory_bytes, "resident_bytes": self.resident_bytes,
               "resident_fits": self.resident_fits, "range_over_working_set": self.range_over_working_set}
        return out if self.wired_bytes is None else {**out, "wired_bytes": self.wired_bytes}


def verdict(peak_bytes: int, device: Device, pred: Prediction | None = None) -> Verdict:
    """``peak_bytes`` against ``device``'s limits; with ``pred``, its resident footprint against the memory."""
    if peak_bytes <= device.working_set_bytes:
        status = FITS
    else:
        status = OVER_WORKING_SET if peak_bytes <= device.memory_limit_bytes else OVER_LIMIT
    if pred is None:
        return Verdict(device, peak_bytes, status)
    return Verdict(device, peak_bytes, status, resident_on_device(pred, device),
                   min(pred.footprint_bytes, device.working_set_bytes) if device.backend == "mlx-metal" else None,
                   pred.peak_high_bytes or 0)


def resident_on_device(pred: Prediction, device: Device) -> int:
    """The part of ``pred``'s resident footprint in ``device``'s memory: all of it on a Mac (unified) or the
    CPU; on a CUDA GPU what MLX holds there (the process baseline is host memory)."""
    return pred.footprint_bytes if device.backend == "mlx-cuda" else pred.resident_bytes


@dataclass(frozen=True, slots=True)
class Option:
    """One setting tried to make a generation fit."""

    label: str
    """The flags, as ``kvsim generate`` (and ``mlx_lm.generate``) take them."""
    workload: Workload
    policy: dict[str, Any] | None
    weights_bits: int | None = None
    """Convert the weights to this many bits first (``mlx_lm.convert -q``); ``None``: as configured."""


def options(w: Workload, policy: dict[str, Any] | None) -> list[Option]:
    """Settings that lower a generation's peak: quantized KV, smaller prefill chunks, a bounded cache,
    kvsim's ``lowpeak`` policy, and the pairs of the strongest ones."""
    out = [
        Option("--kv-bits 8 --quantized-kv-start 0", replace(w, kv_bits=8, quantized_kv_start=0), policy),
        Option("--kv-bits 4 --quantized-kv-start 0", replace(w, kv_bits=4, quantized_kv_start=0), policy),
        Option("--prefill-step-size 512", replace(w, prefill_step_size=512), policy),
        Option("--policy lowpeak", w, {"name": "lowpeak"}),
        Option("--kv-bits 4 --quantized-kv-start 0 --prefill-step-size 512",
               replace(w, kv_bits=4, quantized_kv_start=0, prefill_step_size=512), policy),
    ]
    if w.max_kv_size is None:
        out.append(Option("--max-kv-size 4096", replace(w, max_kv_size=4096), policy))
    return [o for o in out if o.workload != w or o.policy != policy]


def quantized_weights(built: BuiltModel, bits: int) -> BuiltModel:
    """The same model converted with ``mlx_lm.convert -q --q-bits bits`` (group size 64)."""
    config = {**built.config.config, "quantization": {"group_size": 64, "bits": bits}}
    return build_model(ModelConfig(config, built.config.source), built.dtype)


def fix_options(built: BuiltModel, w: Workload, policy: dict[str, Any] | None) -> list[Option]:
    """``options`` and, for a model that is not quantized, its 8- and 4-bit conversions."""
    out = options(w, policy)
    if built.quantization is None:
        out += [Option(f"{bits}-bit weights (mlx_lm.convert -q --q-bits {bits})", w, policy, bits) for bits in (8, 4)]
    return out


# ---- one probe: the predicted peak, or as few plays as decide it against a limit -------------------------
@dataclass(frozen=True, slots=True)
class Probe:
    """A generation's predicted peak held against a limit."""

    peak_bytes: int
    """``predict``'s peak (``exact``), or a lower bound of it that is already over the limit."""
    exact: bool
    plays: int
    """Generations played (``predict`` plays 1 on the CPU, 4 on a GPU profile)."""
    fitted_bytes: int = 0
    """The fitted free timing's peak, when played (0: not); mostly nearer the point than a bound."""

    @property
    def search_bytes(self) -> int:
        """The peak the search places its next probes by: the point, else the larger of the bound (over the
        limit) and the fitted timing's peak."""
        return self.peak_bytes if self.exact else max(self.peak_bytes, self.fitted_bytes)


def probe(built: BuiltModel, w: Workload, backend: str, policy: dict[str, Any] | None,
          limit_bytes: int | None = None, max_plays: int | None = None) -> Probe | None:
    """``predict(...).peak_bytes``, played timing by timing, stopping once a lower bound is over
    ``limit_bytes`` (``None``: never); None when ``max_plays`` plays do not decide it.

    ``predict``'s point is ``point_estimate`` of the fitted, earliest and latest free timings (the floor
    timing only sets the range: not played here). No timing's peak is below the weights plus the caches'
    largest held state at an eval's start (``schedule.Player.play``: ``weights + max(peak,
    kv_before)``), and that state, recorded once (``schedule.record``), does not depend on the timing, so
    the first timing's bounds those not yet replayed; ``point_estimate`` (positive weights, float rounding included) and ``int`` are monotone,
    so a bound over the limit means the point is over it too. Where the fitted timing peaks in the process's
    first eval, the point is ``predict.gpu_peak``'s (the floor timing played too), with no bound before it."""
    profile = load_profile(backend)
    timings = (profile, profile.variant("low"), profile.variant("high")) if profile.is_gpu else (profile,)

    def point(peaks: list[int], floor_bytes: int) -> int:
        if not profile.is_gpu:
            return peaks[0] if peaks else floor_bytes
        ends = [*peaks, *[floor_bytes] * (3 - len(peaks))]
        return int(point_estimate(ends[0], ends[1], ends[2], profile.peak_point_weight))

    peaks: list[int] = []
    floor_bytes = built.weights_bytes
    recorded: GenerationTrace | None = None
    for timing in timings:
        bound = point(peaks, floor_bytes)
        if limit_bytes is not None and bound > limit_bytes:
            return Probe(bound, False, len(peaks), peaks[0] if peaks else 0)
        if max_plays is not None and len(peaks) >= max_plays:
            return None
        if recorded is None:  # as predict does: traced once (a fresh cache of the policy), each timing replayed
            recorded = record(built, w, profile, policy_cache(built, policy))
        evals = replay(recorded, timing).evals
        peaks.append(max(e.peak_bytes for e in evals))
        floor_bytes = max(floor_bytes, built.weights_bytes + max(e.kv_before_bytes for e in evals))
        first_peaks = len(peaks) == 1 and evals[0].peak_bytes == peaks[0]  # the fitted timing's first eval
        if profile.is_gpu and profile.first_eval_point_share > 0 and first_peaks:
            rest = [replay(recorded, t).evals for t in (*timings[1:], profile.floor_variant())]
            return Probe(gpu_peak(profile, evals, *rest)[0], True, 1 + len(rest), peaks[0])
    return Probe(point(peaks, floor_bytes), True, len(peaks), peaks[0])


# ---- the wall-clock budget of a search --------------------------------------------------------------------
SEARCH_BUDGET_S = 60.0
"""``kvsim generate --search-budget-s``'s default."""


@dataclass(slots=True)
class Budget:
    """Wall-clock seconds the settings and the longest-context search may spend: a probe that plays starts
    only while one as long as the mean of those so far still ends within them; past them, probes decided
    by the weights alone (no play) still run."""

    seconds: float
    start_s: float = field(default_factory=time.monotonic)
    spent_s: list[float] = field(default_factory=list)
    """Each probe's wall-clock seconds, of those that played."""

    def allows_another(self) -> bool:
        mean_s = sum(self.spent_s) / len(self.spent_s) if self.spent_s else 0.0
        return time.monotonic() - self.start_s + mean_s <= self.seconds

    def probe(self, built: BuiltModel, w: Workload, backend: str, policy: dict[str, Any] | None,
              limit_bytes: int | None = None) -> Probe | None:
        """``probe``, timed while the budget allows; else decided without a play, or None."""
        if not self.allows_another():
            return probe(built, w, backend, policy, limit_bytes, max_plays=0)
        t = time.monotonic()
        out = probe(built, w, backend, policy, limit_bytes)
        if out is not None and out.plays:
            self.spent_s.append(time.monotonic() - t)
        return out


# ---- the settings that make it fit -------------------------------------------------------------------------
def what_fits(built: BuiltModel, w: Workload, device: Device, backend: str, policy: dict[str, Any] | None,
              budget: Budget | None = None) -> tuple[list[tuple[Option, Probe]], list[Option]]:
    """Each of ``fix_options`` probed at the requested context against the working set, the ones that fit
    first (lowest peak first): the peak of one that fits is ``predict``'s, that of one over may be a lower
    bound (``probe``); and the options the budget left undecided."""
    budget = budget or Budget(math.inf)
    tried, untried = [], []
    for o in fix_options(built, w, policy):
        if o.weights_bits is not None and not budget.allows_another():
            untried.append(o)  # not even built: converted weights are the ones their bound does not decide
            continue
        model = built if o.weights_bits is None else quantized_weights(built, o.weights_bits)
        p = budget.probe(model, o.workload, backend, o.policy, device.working_set_bytes)
        if p is None:
            untried.append(o)
        else:
            tried.append((o, p))
    return sorted(tried, key=lambda op: (not verdict(op[1].peak_bytes, device).fits, op[1].peak_bytes)), untried


# ---- the longest context: where the peak meets the limit, one probe at a time ------------------------------
SEARCH_LIMIT_TOKENS = 1 << 20
"""The search stops here: a prompt this long that fits is reported as this many tokens or more."""
SECANT_PROBES = 4
"""Probes placed by the secant; later ones bisect the bracket (or double while nothing is over)."""


def _ceil(n: float) -> int:
    return int(-(-n // CONTEXT_STEP_TOKENS)) * CONTEXT_STEP_TOKENS


def _floor(n: float) -> int:
    return int(n // CONTEXT_STEP_TOKENS) * CONTEXT_STEP_TOKENS


def _line(a: tuple[int, int], b: tuple[int, int], limit_bytes: int) -> float | None:
    """Where the line through two (tokens, peak) points reaches ``limit_bytes`` (None: flat or falling)."""
    (n0, p0), (n1, p1) = a, b
    if n1 == n0 or (p1 - p0) / (n1 - n0) <= 0:
        return None
    return n0 + (limit_bytes - p0) * (n1 - n0) / (p1 - p0)


def next_probe(start_tokens: int, known: dict[int, int], limit_bytes: int, bytes_per_token: float = 0.0,
               max_tokens: int = SEARCH_LIMIT_TOKENS) -> int | None:
    """The next prompt length to probe in the search for the longest multiple of ``CONTEXT_STEP_TOKENS`` up
    to ``max_tokens`` whose peak is within ``limit_bytes`` (or ``CONTEXT_STEP_TOKENS // 8`` when no multiple
    is), or None when ``known`` ({prompt tokens: peak}) decides it: a fitting length whose next step is
    over. The peak grows about linearly with the prompt (the KV cache), so the first ``SECANT_PROBES`` go
    where a line meets the limit: through the bracket's ends, else the farthest points on the one side
    (a wide base: peaks move in allocator-sized steps), else the one point with slope ``bytes_per_token``, a little past it while nothing is over; later ones halve the bracket (or double the
    prompt while nothing is over), so the search ends within about 4 + 2 x log2(max / step) probes. The
    answer is exact for a peak monotone in the prompt, whatever the line's errors."""
    step = CONTEXT_STEP_TOKENS
    if not known:
        return min(max_tokens, max(step, _floor(start_tokens)))
    fit = sorted(n for n, p in known.items() if p <= limit_bytes)
    over = sorted(n for n, p in known.items() if p > limit_bytes)
    lo, hi = (fit[-1] if fit else 0), (over[0] if over else None)
    if lo >= max_tokens or (fit and hi is not None and hi - lo <= step):
        return None
    secant = len(known) < SECANT_PROBES
    if hi is None:  # everything fits so far: extrapolate upwards
        first = next(iter(known))
        one = _line((first, known[first]), (first + 1, known[first] + bytes_per_token), limit_bytes) \
            if len(known) == 1 and bytes_per_token > 0 else None  # one point: the line of the KV's slope
        est = _line((fit[0], known[fit[0]]), (lo, known[lo]), limit_bytes) if len(fit) > 1 else (one or 2.0 * lo)
        n = _ceil((est or max_tokens) * 1.02)
        return min(max_tokens, max(lo + step, n if secant else max(n, 2 * lo)))
    if not fit:  # nothing fits so far: extrapolate downwards, down to one step, then an eighth of one
        if hi <= step:
            return None if hi <= step // 8 else step // 8
        est = _line((hi, known[hi]), (over[-1], known[over[-1]]), limit_bytes) if len(over) > 1 else None
        n = _floor(est if est is not None else hi / 2)
        return max(step, min(hi - step, n if secant else min(n, _floor(hi / 2))))
    est = _line((lo, known[lo]), (hi, known[hi]), limit_bytes)
    guess = _floor(est) if est is not None and secant else _floor((lo + hi) / 2)
    return max(lo + step, min(hi - step, guess))


def peak_bytes_per_token(pred: Prediction) -> float:
    """How fast the peak grows with the prompt, read off one prediction's played evals: the steepest of the
    prefill chunks' and the decode steps' peaks against their offsets (each holds more KV, and attends over
    more of it, the later it runs); at least the KV's bytes per token."""
    slopes = [pred.peak_kv_bytes / max(pred.peak_offset, 1)]
    for phase in ("prefill", "decode"):
        evals = [e for e in pred.evals if e.phase == phase]
        if len(evals) > 1:
            first, last = min(evals, key=lambda e: e.offset), max(evals, key=lambda e: e.offset)
            if last.offset > first.offset:
                slopes.append((last.peak_bytes - first.peak_bytes) / (last.offset - first.offset))
    return max(slopes)


def longest(known: dict[int, int], limit_bytes: int) -> int:
    """The longest probed prompt within ``limit_bytes`` (0: none)."""
    return max((n for n, p in known.items() if p <= limit_bytes), default=0)


@dataclass(frozen=True, slots=True)
class ContextFound:
    """What the longest-context search found for one policy."""

    fits_tokens: int
    """The longest prompt found to fit (0: none)."""
    over_tokens: int | None
    """The shortest prompt found over the working set (None: none)."""
    done: bool
    """``fits_tokens`` is the answer (``over_tokens`` is a step past it, or it is the search's limit); else
    the budget ran out and it is a lower bound."""
    probes: int
    """Prompt lengths probed (the requested prediction, when it was one, included)."""

    def to_json(self) -> dict[str, Any]:
        return {"fits_tokens": self.fits_tokens, "over_tokens": self.over_tokens, "done": self.done,
                "at_limit": self.fits_tokens >= SEARCH_LIMIT_TOKENS, "probes": self.probes}


def context_per_policy(built: BuiltModel, w: Workload, device: Device, backend: str,
                       policies: dict[str, dict[str, Any] | None], budget: Budget | None = None,
                       known: dict[str, dict[int, int]] | None = None,
                       bytes_per_token: float = 0.0) -> dict[str, ContextFound]:
    """The longest prompt that fits ``device`` with each policy (``max_tokens`` as asked): ``next_probe``'s
    probes, taken in turn across the policies while ``budget`` allows; ``known`` seeds peaks already
    predicted ({policy: {prompt tokens: peak}}, prompts a multiple of ``CONTEXT_STEP_TOKENS``)."""
    budget, limit = budget or Budget(math.inf), device.working_set_bytes
    found = {name: dict((known or {}).get(name, {})) for name in policies}

    def next_of(name: str) -> int | None:
        return next_probe(w.prompt_tokens, found[name], limit, bytes_per_token)

    progress = True
    while progress:  # one probe per policy in turn: a budget that runs out leaves each a bound
        progress = False
        for name, n in [(name, n) for name in policies if (n := next_of(name)) is not None]:
            p = budget.probe(built, replace(w, prompt_tokens=max(n, 2)), backend, policies[name], limit)
            if p is not None:
                found[name][n], progress = p.search_bytes, True
    return {name: ContextFound(longest(k, limit), min((n for n, p in k.items() if p > limit), default=None),
                               next_of(name) is None, len(k)) for name, k in found.items()}
