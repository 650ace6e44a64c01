"""The per-layer table of a custom model: defaults, quick patterns, cell validation (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from kvsim.scenario.spec import DTYPE_BYTES, ModelSpec

COLUMNS: tuple[str, ...] = ("kv_heads", "head_dim", "dtype", "ratio", "window_rows")
INT_COLUMNS: tuple[str, ...] = ("kv_heads", "head_dim", "ratio")
PATTERNS: tuple[str, ...] = (
    "all ratio 1",
    "even layers ratio 4, odd ratio 128",
    "5:1 local/global",
)
LOCAL_WINDOW_ROWS = 1024  # sliding window of the "5:1 local/global" pattern (Gemma 3 uses 1024)

Row = dict[str, Any]


def default_rows(n_layers: int = 8, kv_heads: int = 8, head_dim: int = 128, dtype: str = "float16") -> list[Row]:
    """A uniform model: every layer full attention, ratio 1."""
    return [dict(kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, ratio=1, window_rows=None) for _ in range(n_layers)]


def rows_from_model(model: ModelSpec) -> list[Row]:
    """Table rows of a parsed model (e.g. a preset, to edit it as a custom model)."""
    return [
        dict(kv_heads=x.kv_heads, head_dim=x.head_dim, dtype=x.dtype, ratio=x.ratio, window_rows=x.window_rows)
        for x in model.layers
    ]


def contract_layers(model: ModelSpec) -> list[Row]:
    """The contract's ``model.layers`` entries of a parsed model, every field kept."""
    out: list[Row] = []
    for x in model.layers:
        layer: Row = {"kv_heads": x.kv_heads, "head_dim": x.head_dim, "dtype": x.dtype, "ratio": x.ratio}
        if x.window_rows is not None:
            layer["window_rows"] = x.window_rows
        if x.extra_row_bytes:
            layer["extra_row_bytes"] = x.extra_row_bytes
        out.append(layer)
    return out


def apply_pattern(rows: Sequence[Mapping[str, Any]], pattern: str) -> list[Row]:
    """Set each layer's ratio and window by a named pattern, keeping heads, dims and dtype."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern: unknown pattern, got {pattern!r}")
    out: list[Row] = []
    for i, row in enumerate(rows):
        new = {k: row.get(k) for k in COLUMNS}
        new["ratio"], new["window_rows"] = 1, None
        if pattern == PATTERNS[1]:
            new["ratio"] = 4 if i % 2 == 0 else 128
        elif pattern == PATTERNS[2] and i % 6 != 5:
            new["window_rows"] = LOCAL_WINDOW_ROWS
        out.append(new)
    return out


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def _cell_int(value: Any, where: str, optional: bool = False) -> int | None:
    if _missing(value):
        if optional:
            return None
        raise ValueError(f"{where}: empty cell")
    if isinstance(value, bool):
        raise ValueError(f"{where}: must be a whole number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: must be a number, got {value!r}") from None
    if not math.isfinite(number) or number != int(number):
        raise ValueError(f"{where}: must be a whole number, got {value!r}")
    return int(number)


def table_to_layers(rows: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Contract ``model.layers`` entries from table rows.

    Raises:
        ValueError: one line naming the first bad cell (``layer 3 head_dim: must be a number, got 'x'``);
            range checks are left to ``parse_scenario``.
    """
    if not rows:
        raise ValueError("layer table: must have at least one layer")
    layers: list[Row] = []
    for i, row in enumerate(rows):
        layer: Row = {k: _cell_int(row.get(k), f"layer {i} {k}") for k in INT_COLUMNS}
        dtype = row.get("dtype")
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"layer {i} dtype: must be one of {list(DTYPE_BYTES)}, got {dtype!r}")
        layer["dtype"] = dtype
        window = _cell_int(row.get("window_rows"), f"layer {i} window_rows", optional=True)
        if window is not None:
            layer["window_rows"] = window
        layers.append(layer)
    return layers
