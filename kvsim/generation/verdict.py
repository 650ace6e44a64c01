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

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kvsim.generation.config import ModelConfig
from kvsim.generation.devices import Device
from kvsim.generation.model import BuiltModel, build_model
from kvsim.generation.predict import Prediction, predict
from kvsim.generation.schedule import Workload

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

    @property
    def resident_fits(self) -> bool:
        return self.resident_bytes <= self.device.memory_bytes

    @property
    def fits(self) -> bool:
        return self.status == FITS

    @property
    def headroom_bytes(self) -> int:
        """Working set minus peak (negative: by how much it is over)."""
        return self.device.working_set_bytes - self.peak_bytes

    def to_json(self) -> dict[str, Any]:
        d = self.device
        out = {"device": d.name, "working_set_bytes": d.working_set_bytes, "memory_limit_bytes": d.memory_limit_bytes,
               "status": self.status, "fits": self.fits, "headroom_bytes": self.headroom_bytes,
               "memory_bytes": d.memory_bytes, "resident_bytes": self.resident_bytes,
               "resident_fits": self.resident_fits}
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
                   min(pred.footprint_bytes, device.working_set_bytes) if device.backend == "mlx-metal" else None)


def resident_on_device(pred: Prediction, device: Device) -> int:
    """The part of ``pred``'s resident footprint in ``device``'s memory: all of it on a Mac (unified) or the
    CPU; on a CUDA GPU what MLX holds there (the process baseline is host memory)."""
    return pred.footprint_bytes if device.backend == "mlx-cuda" else pred.resident_bytes


def longest_context(fits: Callable[[int], bool], start_tokens: int, max_tokens_limit: int = 1 << 20) -> int:
    """The longest prompt (a multiple of ``CONTEXT_STEP_TOKENS``) for which ``fits`` holds, 0 if none:
    doubling from ``start_tokens`` (or halving), then bisection. ``fits`` must be monotone."""
    step = CONTEXT_STEP_TOKENS
    lo, hi = 0, max(step, start_tokens // step * step)
    while fits(hi):
        lo, hi = hi, hi * 2
        if hi > max_tokens_limit:
            return lo
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if mid <= lo:
            break
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if lo == 0 and fits(step // 8):
        return step // 8
    return lo


@dataclass(frozen=True, slots=True)
class Option:
    """One setting tried to make a generation fit."""

    label: str
    """The flags, as ``kvsim generate`` (and ``mlx_lm.generate``) take them."""
    workload: Workload
    policy: dict[str, Any] | None


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


def what_fits(built: BuiltModel, w: Workload, device: Device, backend: str,
              policy: dict[str, Any] | None) -> list[tuple[Option, Prediction]]:
    """Each option's prediction at the requested context, the ones that fit first (lowest peak first);
    for a model that is not quantized, its 8- and 4-bit conversions too."""
    tried = [(o, predict(built, o.workload, backend, o.policy)) for o in options(w, policy)]
    if built.quantization is None:
        for bits in (8, 4):
            label = f"{bits}-bit weights (mlx_lm.convert -q --q-bits {bits})"
            tried.append((Option(label, w, policy), predict(quantized_weights(built, bits), w, backend, policy)))
    return sorted(tried, key=lambda op: (not verdict(op[1].peak_bytes, device).fits, op[1].peak_bytes))


def context_per_policy(built: BuiltModel, w: Workload, device: Device, backend: str,
                       policies: dict[str, dict[str, Any] | None]) -> dict[str, int]:
    """The longest prompt that fits ``device`` with each policy (``max_tokens`` as asked)."""
    out = {}
    for name, pol in policies.items():
        def fits(n: int, pol: dict[str, Any] | None = pol) -> bool:
            return verdict(predict(built, replace(w, prompt_tokens=max(n, 2)), backend, pol).peak_bytes, device).fits
        out[name] = longest_context(fits, w.prompt_tokens)
    return out
