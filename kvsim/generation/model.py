"""mlx-lm's model built from a config, weights never evaluated, and the bytes its weights take.

Follows ``mlx_lm.utils.load_model`` and ``mlx_lm.convert`` (mlx-lm 0.32.2): ``_get_classes`` (with its
``model_type`` remapping) picks the class, ``ModelArgs.from_dict`` reads the config, parameters are cast
to the config's dtype as ``convert`` does (``cast_predicate``), and ``nn.quantize`` applies the config's
``quantization`` (per-layer overrides first, then ``quantize_model``'s rule: a layer with ``to_quantized``
whose input size the group size divides, and the model's ``quant_predicate``). Each parameter is then
replaced by a zero-strided broadcast of one scalar: right shape and dtype, no memory.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map, tree_map_with_path

from kvsim.generation.config import ModelConfig, ModelConfigError

CONVERSION_DTYPES = ("float16", "bfloat16", "float32")  # mlx_lm.convert.MODEL_CONVERSION_DTYPES
LEGACY_QUANT = {  # quantization_config methods load_model maps to a quantization (utils.py L517-560)
    "mxfp4": {"group_size": 32, "bits": 4, "mode": "mxfp4"},
    "mxfp8": {"group_size": 32, "bits": 8, "mode": "mxfp8"},
}


@dataclass(frozen=True, slots=True)
class BuiltModel:
    """An mlx-lm model whose parameters are stand-ins (no memory) of the real shapes and dtypes."""

    model: nn.Module
    """The mlx-lm ``Model`` instance (``model.eval()`` applied)."""
    config: ModelConfig
    """The config it was built from."""
    dtype: str
    """The dtype non-quantized floating parameters were cast to."""
    quantization: dict[str, Any] | None
    """The quantization applied (mlx-lm's ``config["quantization"]``), or ``None``."""

    @property
    def weights_bytes(self) -> int:
        return weights_bytes(self.model)


def weights_bytes(model: nn.Module) -> int:
    """Sum of ``nbytes`` over the model's parameters: what ``load_model`` holds once weights are evaluated."""
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def model_dtype(config: dict[str, Any]) -> str:
    """The dtype ``convert`` casts floating parameters to: ``torch_dtype`` (or ``dtype``), else the text
    config's; float32 (the dtype mlx-lm builds in) when none is given."""
    text = config.get("text_config") or {}
    for value in (config.get("torch_dtype"), config.get("dtype"), text.get("torch_dtype"), text.get("dtype")):
        if value is not None:
            if value not in CONVERSION_DTYPES:
                raise ModelConfigError(f"torch_dtype: must be one of {', '.join(CONVERSION_DTYPES)}, got {value!r}")
            return str(value)
    return "float32"


def build_model(mc: ModelConfig, dtype: str | None = None, stand_in: bool = True) -> BuiltModel:
    """mlx-lm's model for ``mc`` with stand-in parameters (``stand_in=False``: mlx-lm's random initial
    values, still unevaluated); one-line ``ModelConfigError`` on bad input."""
    config = dict(mc.config)
    model = _instantiate(config)
    dtype = dtype or model_dtype(config)
    _cast(model, getattr(mx, dtype))
    quantization = quantization_of(config)
    if quantization is not None:
        _quantize(model, quantization)
    model.eval()
    if stand_in:
        _stand_in(model)
    return BuiltModel(model, mc, dtype, quantization)


def _instantiate(config: dict[str, Any]) -> nn.Module:
    """``_get_classes``, ``ModelArgs.from_dict`` and the constructor, with one-line errors."""
    from mlx_lm.utils import _get_classes

    if "quantization_config" not in config and "quantization_config" in (config.get("text_config") or {}):
        config["quantization_config"] = config["text_config"]["quantization_config"]
    try:
        model_class, args_class = _get_classes(config)
    except ValueError:
        raise ModelConfigError(f"model_type: mlx-lm 0.32.2 does not support {config.get('model_type')!r}") from None
    try:
        return model_class(args_class.from_dict(config))
    except TypeError as err:
        missing = re.search(r"required (?:positional |keyword-only )?argument[s]?: '(\w+)'", str(err))
        if missing:
            raise ModelConfigError(f"{missing.group(1)}: missing from the config") from None
        raise ModelConfigError(f"config: mlx-lm cannot build {config['model_type']!r}: {err}") from None
    except KeyError as err:
        raise ModelConfigError(f"{err.args[0]}: missing from the config") from None
    except (ValueError, AttributeError, AssertionError, ZeroDivisionError) as err:
        raise ModelConfigError(f"config: mlx-lm cannot build {config['model_type']!r}: {err}") from None


def _cast(model: nn.Module, dtype: mx.Dtype) -> None:
    """``convert``'s cast: floating parameters the model's ``cast_predicate`` accepts."""
    keep = getattr(model, "cast_predicate", lambda _: True)

    def cast(path: str, v: mx.array) -> mx.array:
        return v.astype(dtype) if keep(path) and mx.issubdtype(v.dtype, mx.floating) else v

    model.update(tree_map_with_path(cast, model.parameters()))


def quantization_of(config: dict[str, Any]) -> dict[str, Any] | None:
    """The quantization ``load_model`` applies: ``quantization``, or a legacy ``quantization_config``."""
    if (q := config.get("quantization")) is not None:
        for key in ("group_size", "bits"):
            if not isinstance(q.get(key), int) or q[key] <= 0:
                raise ModelConfigError(f"quantization.{key}: must be a positive integer, got {q.get(key)!r}")
        return q
    qc = config.get("quantization_config") or {}
    method = qc.get("quant_method")
    if method in LEGACY_QUANT:  # the checkpoint's scales name its quantized layers; the rest stay float
        skip = {p: False for p in qc.get("modules_to_not_convert") or ()}
        return {**LEGACY_QUANT[method], **skip}
    if method in ("awq", "gptq"):
        return {"group_size": int(qc.get("group_size", 128)), "bits": int(qc.get("bits", 4))}
    return None  # fp8 and others: the model's sanitize dequantizes


def _quantize(model: nn.Module, q: dict[str, Any]) -> None:
    """``nn.quantize`` as a converted checkpoint's scales would make ``load_model`` do it."""
    group_size, bits, mode = q["group_size"], q["bits"], q.get("mode", "affine")
    model_predicate = getattr(model, "quant_predicate", None)

    def predicate(path: str, m: nn.Module) -> bool | dict[str, Any]:
        if path in q:  # mlx-lm's per-layer override (a dict, or False)
            return q[path]
        if any(q[k] is False and fnmatch(path, f"{k}*") for k in q if "*" in k):  # modules_to_not_convert
            return False
        if not hasattr(m, "to_quantized") or m.weight.shape[-1] % group_size != 0:
            return False
        return model_predicate(path, m) if model_predicate is not None else True

    nn.quantize(model, group_size=group_size, bits=bits, mode=mode, class_predicate=predicate)


VIEW_PRIMITIVES = frozenset({"Broadcast", "Reshape", "Slice", "Squeeze", "ExpandDims", "Transpose"})
"""Primitives of ``mx.export_to_dot`` that launch no kernel."""


def lazy_state(model: nn.Module) -> list[tuple[mx.array, int]]:
    """Arrays the model's modules keep outside their parameters (a ``_`` attribute) that building the model
    left unevaluated, each with the kernels its graph runs: mlx-lm's ``Llama3RoPE``, ``YarnRoPE`` and
    ``SuScaledRoPE`` keep their frequencies as ``_freqs``, and ``load_model`` evaluates the parameters only,
    so the first eval that reads them computes them, on the stream the model was built on. Read through
    ``mx.export_to_dot``: an evaluated array has no primitive node."""
    out, seen = [], set()
    for _, module in model.named_modules():
        for key, value in module.items():
            if key.startswith("_") and isinstance(value, mx.array) and id(value) not in seen:
                seen.add(id(value))  # a module shared by several layers is listed under each
                dot = io.StringIO()
                mx.export_to_dot(dot, value)
                prims = re.findall(r'label ="(\w+)"', dot.getvalue())
                if prims:
                    out.append((value, sum(p not in VIEW_PRIMITIVES for p in prims)))
    return out


def _stand_in(model: nn.Module) -> None:
    """Replace every parameter by a broadcast of one evaluated scalar of its dtype (no memory)."""
    scalars: dict[mx.Dtype, mx.array] = {}

    def stand_in(v: mx.array) -> mx.array:
        if v.dtype not in scalars:
            scalars[v.dtype] = mx.zeros((), v.dtype)
            mx.eval(scalars[v.dtype])
        return mx.broadcast_to(scalars[v.dtype], v.shape)

    model.update(tree_map(stand_in, model.parameters()))
    mx.eval(model.parameters())
