"""The contract's scenario objects (shared/contract/scenario.md), parsed and validated."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kvsim.core.errors import KvsimError
from kvsim.scenario.layer import KV_BUFFERS, WINDOW_LAYERS, layer_policy, layer_problem
from kvsim.scenario.presets import PRESET_NAMES, load_preset
from kvsim.scenario.spec import DTYPE_BYTES, LayerSpec, ModelSpec
from policies.growth import GrowthPolicy
from policies.parse import PolicyError, rows_field

BACKENDS = ("mlx-cpu", "mlx-cuda", "mlx-metal")
CONSUMERS = ("last_row", "sdpa")
MAX_TOKENS = 1 << 24  # 16M tokens
MAX_LAYERS = 1024
MAX_KV_BYTES = 1 << 50  # 1 PiB: beyond any device

SCENARIO_KEYS = ("id", "backend", "model", "policy", "workload", "consumer", "window_layers")
MODEL_KEYS = ("preset", "layers", "n_layers", "kv_buffers")
LAYER_KEYS = ("kv_heads", "head_dim", "dtype", "ratio", "window_rows", "extra_row_bytes")
WORKLOAD_KEYS = ("prompt_tokens", "prefill_chunk", "decode_tokens", "batch")


class ScenarioError(PolicyError, KvsimError):
    """An invalid scenario field: ``str(err)`` names the field and its value on one line."""


@dataclass(frozen=True, slots=True)
class Workload:
    """Prompt fed in chunks of ``prefill_chunk`` tokens, then single-token decode steps."""

    prompt_tokens: int
    prefill_chunk: int
    decode_tokens: int = 0
    batch: int = 1

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.decode_tokens

    def prefill_tokens(self) -> list[int]:
        """Tokens of each prefill step (the last chunk may be shorter)."""
        full, rest = divmod(self.prompt_tokens, self.prefill_chunk)
        return [self.prefill_chunk] * full + ([rest] if rest else [])

    def step_tokens(self) -> list[int]:
        """Tokens of each step in order (the last prefill chunk may be shorter)."""
        full, rest = divmod(self.prompt_tokens, self.prefill_chunk)
        return [self.prefill_chunk] * full + ([rest] if rest else []) + [1] * self.decode_tokens


@dataclass(frozen=True, slots=True)
class Scenario:
    """One contract scenario. ``policy`` is kept as sorted (key, value) pairs so it hashes."""

    id: Any
    backend: str
    model: ModelSpec
    policy: tuple[tuple[str, Any], ...]
    workload: Workload
    consumer: str = "last_row"
    window_layers: str = "rotating"
    """How sliding-window layers run: mlx-lm's rotating cache, or ``"policy"``: the scenario's policy."""

    @property
    def policy_name(self) -> str:
        return str(dict(self.policy)["name"])

    def policy_dict(self) -> dict[str, Any]:
        return dict(self.policy)

    def layer_policy(self, layer: LayerSpec) -> GrowthPolicy:
        """The growth policy one layer runs (``kvsim.scenario.layer.layer_policy``)."""
        return layer_policy(self.policy_dict(), layer, self.workload.total_tokens, window_layers=self.window_layers)

    def to_dict(self) -> dict[str, Any]:
        """The scenario as a contract JSON object (per-layer model form); kvsim's fields only where not default."""
        layers = []
        for x in self.model.layers:
            layer = {"kv_heads": x.kv_heads, "head_dim": x.head_dim, "dtype": x.dtype, "ratio": x.ratio}
            if x.window_rows is not None:
                layer["window_rows"] = x.window_rows
            if x.extra_row_bytes:
                layer["extra_row_bytes"] = x.extra_row_bytes
            layers.append(layer)
        w = self.workload
        return {
            "id": self.id,
            "backend": self.backend,
            "model": {"layers": layers, **({"kv_buffers": self.model.kv_buffers} if self.model.kv_buffers != 2 else {})},
            "policy": self.policy_dict(),
            "workload": {
                "prompt_tokens": w.prompt_tokens,
                "prefill_chunk": w.prefill_chunk,
                "decode_tokens": w.decode_tokens,
                "batch": w.batch,
            },
            "consumer": self.consumer,
            **({"window_layers": self.window_layers} if self.window_layers != "rotating" else {}),
        }


def _object(obj: Any, where: str, keys: tuple[str, ...] | None = None) -> Mapping[str, Any]:
    """``obj`` as a mapping; with ``keys``, a field outside them is an error naming it (a typo is never ignored)."""
    if not isinstance(obj, Mapping):
        raise ScenarioError(where, obj, "must be an object")
    if keys is not None:
        unknown = sorted((k for k in obj if k not in keys), key=str)
        if unknown:
            key = unknown[0] if isinstance(unknown[0], str) and unknown[0].isprintable() and unknown[0] else repr(unknown[0])
            raise ScenarioError(f"{where}.{key}" if where != "scenario" else key, obj[unknown[0]],
                                f"unknown field (known: {', '.join(keys)})")
    return obj


def _int(obj: Mapping[str, Any], key: str, where: str, default: Any = ..., lo: int = 1, hi: int = MAX_TOKENS) -> int:
    try:
        value = rows_field(obj, key, where, default, lo=lo)
    except PolicyError as err:
        raise ScenarioError(err.field, err.value, err.problem) from None
    if value > hi:
        raise ScenarioError(f"{where}.{key}", value, f"must be <= {hi}")
    return value


def _layer(obj: Any, where: str, defaults: Mapping[str, Any] | None = None) -> LayerSpec:
    obj = {**(defaults or {}), **_object(obj, where, LAYER_KEYS)}
    dtype = obj.get("dtype", "float16")
    if dtype not in DTYPE_BYTES:
        raise ScenarioError(f"{where}.dtype", dtype, f"must be one of {list(DTYPE_BYTES)}")
    window = obj.get("window_rows")
    return LayerSpec(
        kv_heads=_int(obj, "kv_heads", where, hi=4096),
        head_dim=_int(obj, "head_dim", where, hi=65536),
        dtype=dtype,
        ratio=_int(obj, "ratio", where, 1, hi=MAX_TOKENS),
        window_rows=None if window is None else _int(obj, "window_rows", where),
        extra_row_bytes=_int(obj, "extra_row_bytes", where, 0, lo=0, hi=1 << 24),
    )


def parse_model(obj: Any, where: str = "model") -> ModelSpec:
    """A uniform, per-layer or preset model object."""
    obj = _object(obj, where)
    if "preset" in obj:
        _object(obj, where, ("preset", "kv_buffers"))
        name = obj["preset"]
        if name not in PRESET_NAMES:
            raise ScenarioError(f"{where}.preset", name, f"unknown preset (known: {', '.join(PRESET_NAMES)})")
        preset = load_preset(name)
        return replace(preset, kv_buffers=_kv_buffers(obj, where, preset.kv_buffers))
    if "layers" in obj:
        layers = obj["layers"]
        if not isinstance(layers, list) or not layers:
            raise ScenarioError(f"{where}.layers", layers, "must be a non-empty list")
        if len(layers) > MAX_LAYERS:
            raise ScenarioError(f"{where}.layers", f"<{len(layers)} layers>", f"at most {MAX_LAYERS} layers")
        _object(obj, where, ("layers", "kv_buffers"))
        parsed = tuple(_layer(x, f"{where}.layers[{i}]") for i, x in enumerate(layers))
        return ModelSpec("custom", parsed, kv_buffers=_kv_buffers(obj, where, 2))
    n_layers = _int(obj, "n_layers", where, hi=MAX_LAYERS)
    layer = _layer({k: v for k, v in obj.items() if k not in ("n_layers", "kv_buffers")}, where)
    return ModelSpec("uniform", (layer,) * n_layers, kv_buffers=_kv_buffers(obj, where, 2))


def _kv_buffers(obj: Mapping[str, Any], where: str, default: int) -> int:
    value = obj.get("kv_buffers", default)
    if isinstance(value, bool) or value not in KV_BUFFERS:
        raise ScenarioError(f"{where}.kv_buffers", value, f"must be one of {list(KV_BUFFERS)}")
    return int(value)


def parse_workload(obj: Any, where: str = "workload") -> Workload:
    obj = _object(obj, where, WORKLOAD_KEYS)
    w = Workload(
        prompt_tokens=_int(obj, "prompt_tokens", where),
        prefill_chunk=_int(obj, "prefill_chunk", where),
        decode_tokens=_int(obj, "decode_tokens", where, 0, lo=0),
        batch=_int(obj, "batch", where, 1, hi=4096),
    )
    if w.total_tokens > MAX_TOKENS:
        raise ScenarioError(f"{where}.decode_tokens", w.decode_tokens,
                            f"prompt + decode is {w.total_tokens} tokens, must be <= {MAX_TOKENS}")
    return w


def parse_scenario(obj: Any, backend: str | None = None) -> Scenario:
    """Validate one contract scenario object.

    Args:
        obj: The decoded JSON object.
        backend: Overrides the scenario's own ``backend`` (the CLI's ``--backend``).

    Raises:
        ScenarioError: naming the first invalid field and its value.
    """
    obj = _object(obj, "scenario", SCENARIO_KEYS)
    if "id" not in obj:
        raise ScenarioError("id", None, "missing required field")
    sid = obj["id"]
    if not isinstance(sid, (str, int)) or isinstance(sid, bool):
        raise ScenarioError("id", sid, "must be a string or an integer")
    backend = backend or obj.get("backend", "mlx-cpu")
    if backend not in BACKENDS:
        raise ScenarioError("backend", backend, f"must be one of {list(BACKENDS)}")
    for key in ("model", "policy", "workload"):
        if key not in obj:
            raise ScenarioError(key, None, "missing required field")
    consumer = obj.get("consumer", "last_row")
    if consumer not in CONSUMERS:
        raise ScenarioError("consumer", consumer, f"must be one of {list(CONSUMERS)}")
    window_layers = obj.get("window_layers", "rotating")
    if window_layers not in WINDOW_LAYERS:
        raise ScenarioError("window_layers", window_layers, f"must be one of {list(WINDOW_LAYERS)}")
    model = parse_model(obj["model"])
    workload = parse_workload(obj["workload"])
    policy = _object(obj["policy"], "policy")
    for layer in set(model.layers):  # validates the policy against every distinct layer
        _check_window(model, layer, policy)
        try:
            made = layer_policy(policy, layer, workload.total_tokens, window_layers=window_layers)
        except PolicyError as err:
            raise ScenarioError(err.field, err.value, err.problem) from None
        problem = layer_problem(layer, made)
        if problem is not None:
            raise ScenarioError(f"model.layers[{model.layers.index(layer)}].{problem[0]}", problem[1], problem[2])
        if made.name == "quantized" and layer.head_dim % made.group_size:  # type: ignore[attr-defined]
            raise ScenarioError("policy.group_size", made.group_size, f"must divide head_dim {layer.head_dim}")  # type: ignore[attr-defined]
    kv_bytes = model.kv_bytes_per_token(workload.batch) * workload.total_tokens
    if kv_bytes > MAX_KV_BYTES:
        raise ScenarioError("workload", f"{kv_bytes:.3g} bytes of KV", f"exceeds {MAX_KV_BYTES} bytes")
    try:
        json.dumps(policy)
    except (TypeError, ValueError):
        raise ScenarioError("policy", policy, "must be plain JSON") from None
    return Scenario(sid, backend, model, tuple(sorted(policy.items())), workload, consumer, window_layers)


def _check_window(model: ModelSpec, layer: LayerSpec, policy: Mapping[str, Any]) -> None:
    """A window no larger than the context the scenario declares (``policy.context_tokens``, else the largest
    context kvsim plays). A run shorter than the window is a short chat, not an error: the window never fills."""
    context = policy.get("context_tokens", MAX_TOKENS)
    context = context if isinstance(context, int) and not isinstance(context, bool) and context > 0 else MAX_TOKENS
    if layer.window_rows is not None and layer.window_rows > context // layer.ratio:
        raise ScenarioError(f"model.layers[{model.layers.index(layer)}].window_rows", layer.window_rows,
                            f"larger than the context's {context // layer.ratio} rows ({context} tokens)")


def before_layer_model(obj: Any) -> Any:
    """A scenario object as kvsim measured and predicted it before the layer model (calibration format 1):
    separate K and V buffers, sliding-window layers running the scenario's policy, no companion rows.

    Presets are expanded to their layers, so the object means the same whatever the presets say later.
    Anything that is not a valid scenario is returned unchanged, for ``parse_scenario`` to report.
    """
    try:
        model = parse_model(_object(obj, "scenario").get("model"))
    except ScenarioError:
        return obj
    layers = []
    for x in model.layers:
        layer = {"kv_heads": x.kv_heads, "head_dim": x.head_dim, "dtype": x.dtype, "ratio": x.ratio}
        if x.window_rows is not None:
            layer["window_rows"] = x.window_rows
        layers.append(layer)
    return {**obj, "model": {"layers": layers}, "window_layers": "policy"}

