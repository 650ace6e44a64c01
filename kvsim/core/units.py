"""Byte units and the dtypes MLX stores KV rows in."""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3

DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4}
"""Bytes per element of each scenario dtype (``mx.float16.size`` and so on)."""


def mib(n_bytes: float) -> float:
    """``n_bytes`` in MiB."""
    return n_bytes / MIB


def gib(n_bytes: float) -> float:
    """``n_bytes`` in GiB."""
    return n_bytes / GIB
