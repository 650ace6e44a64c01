"""URL query-parameter sync: compact, human-readable encodings of what widgets can't bind.

Plain widgets bind themselves (``bind="query-params"``, keyed by their parameter name);
the layer table and its edits travel as one ``layers`` parameter, run-length encoded:
``8*8/128/f16/1`` is eight layers of 8 heads × 128 dims, float16, ratio 1; a fifth field
is the sliding window in rows.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from kvsim.dashboard.layers import Row, _cell_int

DTYPE_CODES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}
LAYERS_PARAM = "layers"
MAX_ENCODED_LAYERS = 1024


def _num(value: Any) -> str:
    """Whole numbers without a trailing ``.0`` (table cells arrive as floats when a column has blanks)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(int(number)) if number.is_integer() else str(value)


def _layer_code(row: Mapping[str, Any]) -> str:
    dtype = row.get("dtype")
    parts = [_num(row.get("kv_heads")), _num(row.get("head_dim")), DTYPE_CODES.get(dtype, str(dtype)), _num(row.get("ratio"))]
    window = row.get("window_rows")
    if window is not None and window == window:  # NaN-safe
        parts.append(_num(window))
    return "/".join(parts)


def encode_layers(rows: Sequence[Mapping[str, Any]]) -> str:
    """Run-length encode table rows (``count*heads/dim/dtype/ratio[/window]`` joined by commas)."""
    runs: list[list[Any]] = []
    for row in rows:
        code = _layer_code(row)
        if runs and runs[-1][1] == code:
            runs[-1][0] += 1
        else:
            runs.append([1, code])
    return ",".join(code if n == 1 else f"{n}*{code}" for n, code in runs)


def decode_layers(text: str) -> list[Row]:
    """Table rows from :func:`encode_layers` text.

    Raises:
        ValueError: one line naming the bad part.
    """
    rows: list[Row] = []
    for part in filter(None, text.split(",")):
        count_text, _, code = part.rpartition("*")
        count = _cell_int(count_text, f"layers {part!r} count") if count_text else 1
        fields = code.split("/")
        if len(fields) not in (4, 5):
            raise ValueError(f"layers: expected heads/dim/dtype/ratio[/window], got {part!r}")
        if count is None or not 1 <= count <= MAX_ENCODED_LAYERS or len(rows) + count > MAX_ENCODED_LAYERS:
            raise ValueError(f"layers: at most {MAX_ENCODED_LAYERS} layers, got {part!r}")
        row: Row = {
            "kv_heads": _cell_int(fields[0], f"layers {part!r} kv_heads"),
            "head_dim": _cell_int(fields[1], f"layers {part!r} head_dim"),
            "dtype": CODE_DTYPES.get(fields[2], fields[2]),
            "ratio": _cell_int(fields[3], f"layers {part!r} ratio"),
            "window_rows": _cell_int(fields[4], f"layers {part!r} window_rows") if len(fields) == 5 else None,
        }
        rows.extend(dict(row) for _ in range(count))
    if not rows:
        raise ValueError("layers: no layers in the URL parameter")
    return rows


def sync_param(params: MutableMapping[str, str], key: str, value: str, default: str) -> None:
    """Write ``value`` under ``key``, or drop the key when it equals the default (clean URLs)."""
    if value == default:
        if key in params:
            del params[key]
    elif params.get(key) != value:
        params[key] = value
