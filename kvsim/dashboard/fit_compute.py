"""The "Will it fit?" page's computation, no Streamlit: a request, its prediction against a device, the
longest context per policy and the settings that make it fit (``kvsim.generation``), the machine the
dashboard runs on, and the notices a prediction carries. Each job is a picklable function of a frozen
request, so the page can run it in ``kvsim.dashboard.runner``'s worker processes.
"""

from __future__ import annotations

import json
import platform
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from kvsim.core.paths import REPO_DATA_DIR
from kvsim.generation.config import ModelConfig, ModelConfigError, load_model_config
from kvsim.generation.devices import DEVICES, GIB, Device, mlx_device
from kvsim.generation.schedule import Workload
from kvsim.generation.verdict import (  # noqa: F401 - the page's search is kvsim generate's
    CONTEXT_STEP_TOKENS,
    SEARCH_LIMIT_TOKENS,
    longest,
    next_probe,
)

MIB = 1 << 20
MLX_LM = "mlx-lm"
"""The policy choice meaning mlx-lm's own caches (``make_prompt_cache``)."""
POLICIES: dict[str, dict[str, Any] | None] = {
    MLX_LM: None, "step": {"name": "step"}, "geometric": {"name": "geometric"}, "lowpeak": {"name": "lowpeak"},
}
"""Growth policies the page offers (kvsim's ``policies.mlx`` with their defaults)."""
SEARCH_POLICIES = (MLX_LM, "lowpeak")
"""Policies whose longest fitting context the page searches (and the request's own)."""
BACKEND_FROM_DEVICE = "device's"
BACKENDS = (BACKEND_FROM_DEVICE, "mlx-cpu", "mlx-cuda", "mlx-metal")
KV_BITS = (None, 2, 3, 4, 5, 6, 8)
THIS_MACHINE = "this-machine"
GENERATION_DATA = REPO_DATA_DIR / "generation"
"""Measured real generations, ``<backend>-<mlx version>/*.jsonl`` (``kvsim.generation.measure``)."""
DATA_BACKEND = {"mlx-cpu": "mlx-cpu", "mlx-cuda": "mlx-cuda", "mlx-metal": "mlx-metal"}


@dataclass(frozen=True, slots=True)
class FitRequest:
    """One question the page asks: this model, this workload, this device."""

    model: str
    """A shipped config name, a repo id, or a label for an uploaded config (``config_text`` set)."""
    config_text: str | None
    """An uploaded ``config.json``'s text, or ``None`` (``model`` is loaded by ``kvsim.generation``)."""
    workload: Workload
    """What ``mlx_lm.generate`` is asked to do."""
    policy: str
    """A key of ``POLICIES``."""
    backend: str
    """The kvsim backend profile the prediction plays (``mlx-cpu``, ``mlx-cuda``, ``mlx-metal``)."""
    device: Device
    """The device the peak is held against."""


@dataclass(frozen=True, slots=True)
class FitAnswer:
    """A prediction against a device, in plain numbers (pickled back from a worker)."""

    model_label: str
    """The model's display name (``Qwen3-8B``)."""
    layers: int
    """The config's ``num_hidden_layers`` (0 when it has none)."""
    peak_bytes: int
    """Predicted ``mx.get_peak_memory()`` of the whole generation."""
    weights_bytes: int
    kv_bytes: int
    """The caches' bytes after the step that peaks."""
    transient_bytes: int
    """The peak above weights and caches: that step's activations and KV growth copies in flight."""
    final_kv_bytes: int
    """The caches' bytes at the end of the generation."""
    peak_phase: str
    """``prefill``, ``first`` or ``decode``."""
    peak_offset: int
    """Tokens the caches held when the peaking step ran."""
    status: str
    """``kvsim.generation.verdict``'s status: fits, over the GPU working set, over MLX's memory limit."""
    fits: bool
    cache_bytes: int = 0
    """MLX's buffer cache above the peak: what the freed buffers it keeps add to the footprint at most."""
    resident_bytes: int = 0
    """The resident footprint in the device's memory (weights, the largest active + cache, and on a Mac or
    the CPU the process baseline); 0: not predicted."""
    resident_fits: bool = True
    """Whether ``resident_bytes`` fits the device's memory."""
    baseline_bytes: int = 0
    """The process baseline counted in ``resident_bytes`` (the profile's; 0: not measured or not counted)."""
    notes: tuple[str, ...] = ()
    """``Prediction.notes``: where the prediction lies outside what measured runs support."""
    low_bytes: int = 0
    """The low end of the range a GPU run peaks in (``Prediction.peak_low_bytes``); 0 where frees are synchronous."""
    high_bytes: int = 0
    """Its high end (``Prediction.peak_high_bytes``); 0 where frees are synchronous."""
    range_over_working_set: bool = False
    """``Verdict.range_over_working_set``: the peak fits, the top of its range does not."""


# ---- the model -------------------------------------------------------------------------------------
def model_config(request: FitRequest) -> ModelConfig:
    """The request's config: an uploaded text, else whatever ``kvsim.generation`` loads for ``model``."""
    if request.config_text is None:
        return load_model_config(request.model)
    try:
        doc = json.loads(request.config_text)
    except json.JSONDecodeError as err:
        raise ModelConfigError(f"model: {request.model} is not valid JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(doc, dict):
        raise ModelConfigError(f"model: {request.model} must hold a JSON object, got {type(doc).__name__}")
    if "model_type" not in doc:
        raise ModelConfigError(f"model_type: missing from {request.model}")
    return ModelConfig(doc, f"upload:{request.model}")


def model_label(config: ModelConfig, fallback: str) -> str:
    """A display name: the repo id's last part (``_source`` of a shipped config, or the repo id)."""
    source = config.config.get("_source") or (config.source[3:] if config.source.startswith("hf:") else "")
    if isinstance(source, str) and "/" in source:
        return source.rstrip("/").split("/")[-1]
    return fallback.removesuffix(".json")


def _layers(config: ModelConfig) -> int:
    doc = config.config
    return int(doc.get("num_hidden_layers") or (doc.get("text_config") or {}).get("num_hidden_layers") or 0)


@lru_cache(maxsize=4)
def _built(request_model: str, config_text: str | None) -> tuple[Any, ModelConfig]:
    """The built model of a request (kept per process: a worker forked after a build starts warm)."""
    from kvsim.generation.model import build_model

    config = model_config(FitRequest(request_model, config_text, Workload(2, 1), MLX_LM, "mlx-cpu",
                                     DEVICES["mac-16gb"]))
    return build_model(config), config


# ---- the jobs (run in worker processes) -------------------------------------------------------------
def answer(request: FitRequest) -> FitAnswer:
    """The prediction and its verdict."""
    from kvsim.generation.predict import predict
    from kvsim.generation.verdict import verdict

    built, config = _built(request.model, request.config_text)
    pred = predict(built, request.workload, request.backend, POLICIES[request.policy])
    v = verdict(pred.peak_bytes, request.device, pred)
    return FitAnswer(model_label(config, request.model), _layers(config), pred.peak_bytes, pred.weights_bytes,
                     pred.peak_kv_bytes, pred.transient_bytes, pred.kv_bytes, pred.peak_phase, pred.peak_offset,
                     v.status, v.fits, pred.resident_cache_bytes, v.resident_bytes, v.resident_fits,
                     v.resident_bytes - pred.footprint_bytes, tuple(pred.notes), pred.peak_low_bytes or 0,
                     pred.peak_high_bytes or 0, v.range_over_working_set)


def peak(request: FitRequest) -> int:
    """One probe of the longest-context search: the predicted peak where it is within the device's working
    set, else a figure over it (``kvsim.generation.verdict.probe``: as few plays as decide it)."""
    from kvsim.generation.verdict import probe

    built, _ = _built(request.model, request.config_text)
    policy, limit = POLICIES[request.policy], request.device.working_set_bytes
    return probe(built, request.workload, request.backend, policy, limit).search_bytes


def fix_peak(request: FitRequest, label: str) -> int:
    """The predicted peak with one of ``fix_labels``' settings."""
    from kvsim.generation import verdict as vd
    from kvsim.generation.predict import predict

    built, _ = _built(request.model, request.config_text)
    policy = POLICIES[request.policy]
    for o in vd.options(request.workload, policy):
        if o.label == label:
            return predict(built, o.workload, request.backend, o.policy).peak_bytes
    bits = int(label.split("-bit")[0])
    return predict(vd.quantized_weights(built, bits), request.workload, request.backend, policy).peak_bytes


def fix_labels(request: FitRequest, config: ModelConfig) -> list[str]:
    """The settings ``kvsim.generation.verdict.what_fits`` tries, by their flags: its ``options`` and, for a
    model that is not quantized, its 8- and 4-bit conversions."""
    from kvsim.generation.model import quantization_of
    from kvsim.generation.verdict import options

    labels = [o.label for o in options(request.workload, POLICIES[request.policy])]
    if quantization_of(dict(config.config)) is None:
        labels += [f"{bits}-bit weights (mlx_lm.convert -q --q-bits {bits})" for bits in (8, 4)]
    return labels


def at_prompt(request: FitRequest, prompt_tokens: int, policy: str) -> FitRequest:
    """The request with another prompt length and policy (a probe of the search)."""
    return replace(request, workload=replace(request.workload, prompt_tokens=max(prompt_tokens, 2)), policy=policy)


# ---- the longest-context search, one probe (a prediction) at a time: kvsim generate's ---------------
STEP_TOKENS = CONTEXT_STEP_TOKENS
"""The search's granularity."""


# ---- the machine the dashboard runs on ----------------------------------------------------------------
def _ram_bytes() -> int | None:
    """Physical memory: psutil if installed, else /proc/meminfo, else ``sysctl hw.memsize``."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import subprocess

        out = subprocess.run(["sysctl", "-n", "hw.memsize"], capture_output=True, text=True, timeout=5, check=True)
        return int(out.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _mlx_info() -> dict[str, Any]:
    """``mx.device_info()`` of MLX's default device, when mlx is importable."""
    try:
        import mlx.core as mx

        return dict(mx.device_info())
    except Exception:  # noqa: BLE001 - no mlx, or no device: detection falls back to the RAM size
        return {}


@lru_cache(maxsize=1)
def detect_device() -> Device:
    """The machine the dashboard runs on, as a device: a Mac (MLX's Metal working set when mlx reports
    it), a GPU MLX reports, else this host's RAM on the CPU (MLX's CPU limit is 0.8 x RAM,
    ``kvsim.dashboard.devices``)."""
    info, ram = _mlx_info(), _ram_bytes() or 0
    mem = int(info.get("memory_size") or ram)
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        ws = int(info.get("max_recommended_working_set_size") or 0) or None
        return mlx_device(THIS_MACHINE, mem, "mlx-metal", ws)
    if info.get("memory_size"):  # MLX reports a device memory size on its GPU backends only
        return mlx_device(THIS_MACHINE, mem, "mlx-cuda")
    return mlx_device(THIS_MACHINE, ram, "mlx-cpu")


def device_choices() -> dict[str, Device]:
    """The page's devices: this machine first, then Macs 8-512 GB and common GPUs."""
    return {THIS_MACHINE: detect_device(), **DEVICES}


def device_label(d: Device) -> str:
    """``16 GB Mac``, ``H100 (80 GiB)``, ``this machine (24 GB, CPU)``."""
    if d.name == THIS_MACHINE:
        kind = {"mlx-metal": "Mac", "mlx-cuda": "GPU", "mlx-cpu": "CPU"}[d.backend]
        return f"this machine ({round(d.memory_bytes / GIB)} GB, {kind})"
    m = re.fullmatch(r"mac-(\d+)gb", d.name)
    if m:
        return f"{m.group(1)} GB Mac"
    return f"{d.name.upper()} ({round(d.memory_bytes / GIB)} GiB)"


def device_phrase(d: Device) -> str:
    """The device in a sentence: ``a 16 GB Mac``, ``H100 (80 GiB)``."""
    label = device_label(d)
    if not d.name.startswith("mac-"):
        return label
    return f"{'an' if label.startswith(('8 ', '18 ')) else 'a'} {label}"


# ---- what the page says -----------------------------------------------------------------------------
def size(n_bytes: int) -> str:
    """Rounded: GiB from 1 GiB (one decimal, none from 100), else MiB."""
    if abs(n_bytes) >= 100 * GIB:
        return f"{n_bytes / GIB:,.0f} GiB"
    if abs(n_bytes) >= GIB:
        return f"{n_bytes / GIB:.1f} GiB"
    return f"{n_bytes / MIB:,.0f} MiB"


def tokens(n: int) -> str:
    """``32K`` for multiples of 1024 from 1K (``1.5K`` for halves), else the number with separators."""
    if n >= 1024 and n % 512 == 0:
        k = n / 1024
        return f"{k:g}K"
    return f"{n:,}"


def sentence(request: FitRequest, a: FitAnswer) -> str:
    """The verdict in one sentence."""
    w = request.workload
    what = f"{a.model_label} at {tokens(w.prompt_tokens)} tokens (+{tokens(w.max_tokens)} generated)"
    where = device_phrase(request.device)
    d = request.device
    if a.fits:
        return f"{what} fits {where} with {size(d.working_set_bytes - a.peak_bytes)} to spare."
    gpu = d.working_set_bytes < d.memory_limit_bytes
    limit = "GPU working set" if gpu else "MLX memory limit"
    tail = f" and past MLX's {size(d.memory_limit_bytes)} memory limit" if gpu and a.peak_bytes > d.memory_limit_bytes else ""
    return (f"{what} does not fit {where}: its peak, {size(a.peak_bytes)}, is {size(a.peak_bytes - d.working_set_bytes)} "
            f"over the {size(d.working_set_bytes)} {limit}{tail}.")


def breakdown(a: FitAnswer) -> list[tuple[str, int]]:
    """The peak's stacked parts, then what MLX's buffer cache adds above it, in bytes (they sum to what MLX
    holds at most: the resident footprint less the process baseline)."""
    return [("weights", a.weights_bytes), ("KV cache", a.kv_bytes),
            ("activations + growth transient", max(0, a.transient_bytes)), ("buffer cache", a.cache_bytes)]


def resident_sentence(request: FitRequest, a: FitAnswer) -> str:
    """The resident footprint against the device's memory, in one sentence ("" when not predicted)."""
    if not a.resident_bytes:
        return ""
    d = request.device
    base = (f", {size(a.baseline_bytes)} of it the Python process with MLX and mlx-lm loaded" if a.baseline_bytes
            else "")
    verb = "fits in" if a.resident_fits else "does not fit in"
    return (f"Resident footprint {size(a.resident_bytes)} (weights, KV, activations and MLX's buffer cache at "
            f"their largest{base}): it {verb} the {size(d.memory_bytes)} of {'memory' if d.backend != 'mlx-cuda' else 'GPU memory'}.")


@dataclass(frozen=True, slots=True)
class MeasuredRange:
    """What real generations measured on a backend span (``data/generation``)."""

    runs: int
    max_context_tokens: int
    """The longest prompt + generated tokens measured."""
    max_peak_bytes: int


@lru_cache(maxsize=8)
def measured_range(backend: str) -> MeasuredRange | None:
    """The measured generations of ``backend`` (every ``data/generation/<backend>-*/*.jsonl``), or None."""
    runs, context, peak = 0, 0, 0
    for path in sorted(GENERATION_DATA.glob(f"{DATA_BACKEND.get(backend, backend)}-*/*.jsonl")):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                row = json.loads(line)
                context = max(context, int(row["prompt_tokens"]) + int(row["max_tokens"]))
                peak = max(peak, int(row["peak_bytes"]))
                runs += 1
            except (ValueError, KeyError, TypeError):
                continue
    return MeasuredRange(runs, context, peak) if runs else None


def notices(request: FitRequest, a: FitAnswer) -> list[str]:
    """Where the prediction goes past what was measured."""
    out = []
    if request.backend == "mlx-metal":
        out.append("mlx-metal is an unverified profile: it follows MLX's Metal allocator source, but no real "
                   "Metal generation has been measured against it.")
    r = measured_range(request.backend)
    w = request.workload
    if r is None and request.backend != "mlx-metal":
        out.append(f"No real {request.backend} generation has been measured yet: this prediction is not checked "
                   "against data.")
    elif r is not None:
        beyond = []
        if w.prompt_tokens + w.max_tokens > r.max_context_tokens:
            beyond.append(f"{tokens(w.prompt_tokens + w.max_tokens)} tokens (measured up to "
                          f"{tokens(r.max_context_tokens)})")
        if a.peak_bytes > r.max_peak_bytes:
            beyond.append(f"a {size(a.peak_bytes)} peak (measured up to {size(r.max_peak_bytes)})")
        if beyond:
            out.append(f"Beyond the measured range of {r.runs} real {request.backend} generations: "
                       + " and ".join(beyond) + ".")
    if a.range_over_working_set:
        out.append(f"The predicted peak fits, but a run may peak up to {size(a.high_bytes)} (the GPU frees "
                   f"asynchronously), over the {size(request.device.working_set_bytes)} GPU working set.")
    return out + list(a.notes)

