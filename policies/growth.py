"""Pure capacity arithmetic of KV-cache growth policies (no MLX import).

Each policy answers one question: a layer's buffer holds ``capacity_rows`` rows of
which ``held_rows`` are live, and ``add_rows`` more arrive; does it grow, to what
capacity, and how? ``grow`` returns ``None`` when the rows fit, else a :class:`Growth`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Protocol


class Mechanism(str, Enum):
    """How a buffer changes size; the simulator tells these apart."""

    FRESH = "fresh"  # first allocation: zeros of the new capacity
    CONCAT = "concat"  # new = concatenate([old prefix, zeros(extension)]): copy, old freed after
    REALLOC = "realloc"  # allocate the full new buffer, copy the live prefix, free old (ds4 GPU)
    IN_PLACE = "in_place"  # extra blocks beside the old ones, nothing copied (paged)
    TRIM = "trim"  # cut back to a window: concatenate([head, tail]) of the old buffer (rotating)


@dataclass(frozen=True, slots=True)
class Growth:
    """One growth event of one buffer.

    Args:
        capacity_rows: Capacity after the growth.
        mechanism: How the growth happens.
        kept_rows: Rows of the old buffer carried over (the concat's first input, the
            realloc's copied prefix, or the untouched blocks of an in-place growth).
        fills_zeros: Whether the extension is a zeros array (False when the new rows
            themselves are concatenated, as ``RotatingKVCache`` does in prefill).
        head_rows: Rows of a rotating trim's head (``keep``): the first part it concatenates,
            no copy at all when empty.
    """

    capacity_rows: int
    mechanism: Mechanism
    kept_rows: int = 0
    fills_zeros: bool = True
    head_rows: int = 0

    @property
    def extension_rows(self) -> int:
        """Rows added beyond what is kept."""
        return self.capacity_rows - self.kept_rows


class GrowthPolicy(Protocol):
    name: str

    def grow(self, capacity_rows: int, held_rows: int, add_rows: int) -> Growth | None: ...


def _ceil_to(rows: int, multiple: int) -> int:
    return -(-rows // multiple) * multiple


def _fits(capacity_rows: int, held_rows: int, add_rows: int) -> bool:
    return capacity_rows > 0 and held_rows + add_rows <= capacity_rows


def step_growth(capacity_rows: int, held_rows: int, add_rows: int, step_rows: int) -> Growth | None:
    """mlx-lm ``KVCache`` exactly: step-rounded extension, trim to the offset when unaligned."""
    if _fits(capacity_rows, held_rows, add_rows):
        return None
    extension = _ceil_to(add_rows, step_rows)
    if capacity_rows == 0:
        return Growth(extension, Mechanism.FRESH)
    kept = held_rows if held_rows % step_rows else capacity_rows
    return Growth(kept + extension, Mechanism.CONCAT, kept_rows=kept)


@dataclass(frozen=True, slots=True)
class StepPolicy:
    """mlx-lm ``KVCache`` with its class attribute ``step`` set to ``step_rows``."""

    step_rows: int = 256
    name: str = "step"

    def grow(self, capacity_rows: int, held_rows: int, add_rows: int) -> Growth | None:
        return step_growth(capacity_rows, held_rows, add_rows, self.step_rows)


@dataclass(frozen=True, slots=True)
class PreallocPolicy:
    """mlx-lm PR #1038 ``KVCache(max_size=M)``: ``max(M, rows)`` up front, then step 256."""

    max_size_rows: int
    step_rows: int = 256
    name: str = "prealloc"

    def grow(self, capacity_rows: int, held_rows: int, add_rows: int) -> Growth | None:
        if capacity_rows == 0:
            return Growth(max(self.max_size_rows, add_rows), Mechanism.FRESH)
        return step_growth(capacity_rows, held_rows, add_rows, self.step_rows)


@dataclass(frozen=True, slots=True)
class GeometricPolicy:
    """Seed rows, then multiply by ``factor`` until the rows fit, capped (ds4 PR #1010).

    ``cap_rows`` bounds the capacity but never below what is needed; ``mechanism`` is
    ``CONCAT`` on MLX (concatenate with zeros) or ``REALLOC`` (ds4's Metal path).
    """

    seed_rows: int
    factor: float = 2.0
    cap_rows: int | None = None
    mechanism: Mechanism = Mechanism.CONCAT
    name: str = "geometric"

    def _target(self, start_rows: int, need_rows: int) -> int:
        rows = start_rows
        while rows < need_rows:
            rows = max(rows + 1, math.ceil(rows * self.factor))
        if self.cap_rows is not None:
            rows = min(rows, self.cap_rows)
        return max(rows, need_rows)

    def grow(self, capacity_rows: int, held_rows: int, add_rows: int) -> Growth | None:
        if _fits(capacity_rows, held_rows, add_rows):
            return None
        need = held_rows + add_rows
        if capacity_rows == 0:
            return Growth(self._target(self.seed_rows, need), Mechanism.FRESH)
        kept = held_rows if self.mechanism is Mechanism.REALLOC else capacity_rows
        return Growth(self._target(capacity_rows, need), self.mechanism, kept_rows=kept)


@dataclass(frozen=True, slots=True)
class FullPolicy:
    """The whole context up front (ds4 on CUDA/ROCm): ``context_rows`` on the first update."""

    context_rows: int
    name: str = "full"

    def grow(self, capacity_rows: int, held_rows: int, add_rows: int) -> Growth | None:
        if _fits(capacity_rows, held_rows, add_rows):
            return None
        if capacity_rows == 0:
            return Growth(max(self.context_rows, add_rows), Mechanism.FRESH)
        return Growth(held_rows + add_rows, Mechanism.REALLOC, kept_rows=held_rows)


@dataclass(frozen=True, slots=True)
class PagedPolicy:
    """Fixed blocks of ``block_rows`` added beside the old ones, no copy (vLLM-style)."""

    block_rows: int = 16
    name: str = "paged"

    def grow(self, capacity_rows: int, held_rows: int, add_rows: int) -> Growth | None:
        if _fits(capacity_rows, held_rows, add_rows):
            return None
        target = _ceil_to(held_rows + add_rows, self.block_rows)
        if capacity_rows == 0:
            return Growth(target, Mechanism.FRESH)
        return Growth(target, Mechanism.IN_PLACE, kept_rows=capacity_rows)


@dataclass(frozen=True, slots=True)
class RotatingPolicy:
    """mlx-lm ``RotatingKVCache(max_size, keep)``: step growth to ``max_size``, then a ring.

    Single-row updates grow by ``min(step, max_size - held)`` and then write in place.
    Multi-row updates rebuild the buffer: the last ``max_size - 1`` rows (``keep`` first
    rows included) concatenated with the new rows.
    """

    max_size_rows: int
    keep_rows: int = 0
    step_rows: int = 256
    name: str = "rotating"

    def grow(self, capacity_rows: int, held_rows: int, add_rows: int) -> Growth | None:
        if add_rows > 1:
            if capacity_rows == 0:
                return Growth(add_rows, Mechanism.FRESH, fills_zeros=False)
            kept = min(held_rows, self.max_size_rows - 1)
            return Growth(kept + add_rows, Mechanism.CONCAT, kept_rows=kept, fills_zeros=False, head_rows=self.keep_rows)
        if capacity_rows >= self.max_size_rows or _fits(capacity_rows, held_rows, add_rows):
            return None
        extension = min(self.step_rows, self.max_size_rows - held_rows)
        if capacity_rows == 0:
            return Growth(extension, Mechanism.FRESH)
        return Growth(capacity_rows + extension, Mechanism.CONCAT, kept_rows=capacity_rows)

    def trim(self, capacity_rows: int, add_rows: int) -> Growth | None:
        """A single-row update on a buffer a prefill left longer than the window first cuts it
        back to ``max_size`` rows (``concatenate([first keep rows, last rows])``)."""
        if add_rows == 1 and capacity_rows > self.max_size_rows:
            return Growth(self.max_size_rows, Mechanism.TRIM, kept_rows=self.max_size_rows, fills_zeros=False,
                          head_rows=self.keep_rows)
        return None


@dataclass(frozen=True, slots=True)
class QuantizedPolicy:
    """mlx-lm ``QuantizedKVCache``: step arithmetic over packed data, scales and biases."""

    step_rows: int = 256
    bits: int = 8
    group_size: int = 64
    name: str = "quantized"

    def grow(self, capacity_rows: int, held_rows: int, add_rows: int) -> Growth | None:
        return step_growth(capacity_rows, held_rows, add_rows, self.step_rows)

    def component_row_bytes(self, kv_heads: int, head_dim: int, itemsize_bytes: int) -> tuple[int, int, int]:
        """Bytes per row (batch 1) of packed uint32 data, scales and biases."""
        packed = kv_heads * (head_dim * self.bits // 32) * 4
        groups = kv_heads * (head_dim // self.group_size) * itemsize_bytes
        return packed, groups, groups


@dataclass(frozen=True, slots=True)
class LowPeakPolicy:
    """kvsim's own policy: step arithmetic, each K and each V grown at its own evaluation
    barrier, so only one buffer's old and new copies ever coexist."""

    step_rows: int = 256
    name: str = "lowpeak"

    def grow(self, capacity_rows: int, held_rows: int, add_rows: int) -> Growth | None:
        return step_growth(capacity_rows, held_rows, add_rows, self.step_rows)
