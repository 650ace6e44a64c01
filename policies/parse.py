"""Policy objects from the contract's ``policy`` dicts, with one-line validation errors."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from policies.growth import (
    FullPolicy,
    GeometricPolicy,
    GrowthPolicy,
    LowPeakPolicy,
    Mechanism,
    PagedPolicy,
    PreallocPolicy,
    QuantizedPolicy,
    RotatingPolicy,
    StepPolicy,
)

MAX_ROWS = 1 << 28  # 268M rows: beyond any context a real engine holds
# Bits dividing 32 only: mlx-lm 0.32.2's QuantizedKVCache sizes packed rows as dim // (32 // bits),
# which disagrees with mx.quantize for 3, 5 and 6 bits (a broadcast error on update).
QUANT_BITS = (2, 4, 8)
QUANT_GROUPS = (32, 64, 128)


class PolicyError(ValueError):
    """An invalid policy field; ``str(err)`` is a one-line message naming field and value."""

    def __init__(self, field: str, value: Any, problem: str) -> None:
        self.field, self.value, self.problem = field, value, problem
        super().__init__(f"{field}: {problem}, got {value!r}")

    def __reduce__(self) -> tuple[type[PolicyError], tuple[str, Any, str]]:
        """Pickle by the constructor's arguments, so the error crosses a process pool intact."""
        return type(self), (self.field, self.value, self.problem)


def rows_field(obj: Mapping[str, Any], key: str, where: str, default: Any = ..., lo: int = 1) -> int:
    """An integer row count in ``[lo, MAX_ROWS]``; bools and floats are rejected."""
    if key not in obj:
        if default is ...:
            raise PolicyError(f"{where}.{key}", None, "missing required field")
        return default
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"{where}.{key}", value, "must be an integer")
    if value < lo:
        raise PolicyError(f"{where}.{key}", value, f"must be >= {lo}")
    if value > MAX_ROWS:
        raise PolicyError(f"{where}.{key}", value, f"must be <= {MAX_ROWS}")
    return value


def _factor(obj: Mapping[str, Any], where: str) -> float:
    value = obj.get("factor", 2)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise PolicyError(f"{where}.factor", value, "must be a number")
    if not 1 < value <= 16:
        raise PolicyError(f"{where}.factor", value, "must be > 1 and <= 16")
    return float(value)


def _choice(obj: Mapping[str, Any], key: str, where: str, default: int, allowed: tuple[int, ...]) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise PolicyError(f"{where}.{key}", value, f"must be one of {list(allowed)}")
    return int(value)


def _context_rows(obj: Mapping[str, Any], where: str, ratio: int, context_tokens: int | None) -> int:
    """A layer's full-context rows: ``context_tokens // ratio + slack_rows`` (ds4: slack 2)."""
    if "context_tokens" in obj or context_tokens is None:
        context_tokens = rows_field(obj, "context_tokens", where)
    return max(context_tokens // ratio + rows_field(obj, "slack_rows", where, 0, lo=0), 1)


def _geometric(obj: Mapping[str, Any], where: str, ratio: int, context_tokens: int | None) -> GeometricPolicy:
    seed = rows_field(obj, "seed_rows", where)
    for key, lo in (("context_tokens", 1), ("slack_rows", 0)):  # validated even when cap is not "context"
        if key in obj:
            rows_field(obj, key, where, lo=lo)
    cap_value = obj.get("cap")
    if cap_value == "context":
        cap: int | None = _context_rows(obj, where, ratio, context_tokens)
    elif cap_value is None:
        cap = None
    else:
        cap = rows_field(obj, "cap", where)
        if cap < seed:
            raise PolicyError(f"{where}.cap", cap, f"must be >= seed_rows ({seed})")
    mech = obj.get("mechanism", "concat")
    if mech not in ("concat", "realloc"):
        raise PolicyError(f"{where}.mechanism", mech, "must be 'concat' or 'realloc'")
    return GeometricPolicy(seed, _factor(obj, where), cap, Mechanism(mech))


def _full(obj: Mapping[str, Any], where: str, ratio: int, context_tokens: int | None) -> FullPolicy:
    return FullPolicy(_context_rows(obj, where, ratio, context_tokens))


def _rotating(obj: Mapping[str, Any], where: str) -> RotatingPolicy:
    max_size = rows_field(obj, "max_size", where)
    keep = rows_field(obj, "keep", where, 0, lo=0)
    if keep >= max_size:
        raise PolicyError(f"{where}.keep", keep, f"must be < max_size ({max_size})")
    return RotatingPolicy(max_size, keep, rows_field(obj, "step", where, 256))


def _quantized(obj: Mapping[str, Any], where: str) -> QuantizedPolicy:
    return QuantizedPolicy(
        rows_field(obj, "step", where, 256),
        _choice(obj, "bits", where, 8, QUANT_BITS),
        _choice(obj, "group_size", where, 64, QUANT_GROUPS),
    )


_FIELDS: dict[str, tuple[str, ...]] = {
    "step": ("step",),
    "prealloc": ("max_size", "step"),
    "geometric": ("seed_rows", "factor", "cap", "mechanism", "context_tokens", "slack_rows"),
    "full": ("context_tokens", "slack_rows"),
    "paged": ("block_rows",),
    "rotating": ("max_size", "keep", "step"),
    "quantized": ("step", "bits", "group_size"),
    "lowpeak": ("step",),
}

_BUILD: dict[str, Callable[[Mapping[str, Any], str, int, int | None], GrowthPolicy]] = {
    "step": lambda o, w, r, c: StepPolicy(rows_field(o, "step", w, 256)),
    "prealloc": lambda o, w, r, c: PreallocPolicy(rows_field(o, "max_size", w), rows_field(o, "step", w, 256)),
    "geometric": _geometric,
    "full": _full,
    "paged": lambda o, w, r, c: PagedPolicy(rows_field(o, "block_rows", w, 16)),
    "rotating": lambda o, w, r, c: _rotating(o, w),
    "quantized": lambda o, w, r, c: _quantized(o, w),
    "lowpeak": lambda o, w, r, c: LowPeakPolicy(rows_field(o, "step", w, 256)),
}

POLICY_NAMES: tuple[str, ...] = tuple(_BUILD)


def policy_from_dict(
    obj: Any, *, ratio: int = 1, context_tokens: int | None = None, where: str = "policy"
) -> GrowthPolicy:
    """Build a policy from a contract ``policy`` object.

    Args:
        obj: e.g. ``{"name": "step", "step": 256}``.
        ratio: The layer's compression ratio (rows per token), for context-sized policies.
        context_tokens: Tokens of the whole context, used by ``full`` and ``cap: "context"``
            unless the policy names its own ``context_tokens``.
        where: Field path used in error messages.

    Raises:
        PolicyError: naming the first invalid field and its value.
    """
    if not isinstance(obj, Mapping):
        raise PolicyError(where, obj, "must be an object")
    rows_field({"ratio": ratio}, "ratio", "layer")  # the caller's arguments, checked like fields
    if context_tokens is not None:
        rows_field({"context_tokens": context_tokens}, "context_tokens", "layer")
    name = obj.get("name")
    if not isinstance(name, str) or name not in _BUILD:
        raise PolicyError(f"{where}.name", name, f"unknown policy (known: {', '.join(POLICY_NAMES)})")
    unknown = sorted(set(obj) - {"name", *_FIELDS[name]}, key=str)
    if unknown:
        key = unknown[0]
        label = key if isinstance(key, str) and key.isprintable() else repr(key)  # keep the message one line
        raise PolicyError(f"{where}.{label}", obj[key], f"unknown field for policy {name!r}")
    return _BUILD[name](obj, where, ratio, context_tokens)
