"""Model specs: per-layer KV-cache geometry, with presets in ``kvsim/data/models``."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.core.units import DTYPE_BYTES

__all__ = ["DTYPE_BYTES", "LayerSpec", "ModelSpec"]


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """One layer's KV cache geometry. K and V rows have the same shape.

    Args:
        kv_heads: KV heads per layer.
        head_dim: Width of one head's row.
        dtype: ``float16``, ``bfloat16`` or ``float32``.
        ratio: The layer keeps one row per ``ratio`` tokens (compressed attention).
        window_rows: Sliding-window length in rows, or ``None`` for a full cache.
        extra_row_bytes: Bytes per row of a companion cache grown in lockstep
            (ds4's indexer keys on ratio-4 layers), 0 if none.
    """

    kv_heads: int
    head_dim: int
    dtype: str = "float16"
    ratio: int = 1
    window_rows: int | None = None
    extra_row_bytes: int = 0

    @property
    def itemsize_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def row_bytes(self) -> int:
        """Bytes of one K (or one V) row for batch 1."""
        return self.kv_heads * self.head_dim * self.itemsize_bytes

    def rows_after(self, tokens: int) -> int:
        """Rows the layer has received after ``tokens`` tokens."""
        return tokens // self.ratio

    def rows_in_step(self, start_token: int, n_tokens: int) -> int:
        """Rows received in a step of ``n_tokens`` starting after ``start_token``."""
        return (start_token + n_tokens) // self.ratio - start_token // self.ratio


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model's KV-cache-bearing layers, in order."""

    name: str
    """The preset's name, ``uniform`` or ``custom``."""
    layers: tuple[LayerSpec, ...]
    """The layers that hold a KV cache, in order."""
    source: str = ""
    """Where the geometry comes from (a preset cites its public source)."""
    notes: str = field(default="", compare=False)
    """Free text shown with a preset."""
    kv_buffers: int = 2
    """Buffers of attention rows per layer: 2 for separate K and V (mlx-lm), 1 for a shared latent (ds4)."""

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def kv_bytes_per_token(self, batch: int = 1) -> float:
        """Average bytes one token adds across all layers (full caches, companion rows included)."""
        return sum((self.kv_buffers * lay.row_bytes + lay.extra_row_bytes) * batch / lay.ratio for lay in self.layers)

    def shapes(self) -> tuple[tuple[int, int, str], ...]:
        """Distinct (kv_heads, head_dim, dtype) in first-seen order (the input pool)."""
        seen: dict[tuple[int, int, str], None] = {}
        for lay in self.layers:
            seen.setdefault((lay.kv_heads, lay.head_dim, lay.dtype), None)
        return tuple(seen)


def uniform(n_layers: int, kv_heads: int, head_dim: int, dtype: str = "float16", name: str = "uniform") -> ModelSpec:
    """A model whose layers all share one geometry and ratio 1."""
    layer = LayerSpec(kv_heads=kv_heads, head_dim=head_dim, dtype=dtype)
    return ModelSpec(name=name, layers=(layer,) * n_layers)
