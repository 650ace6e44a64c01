"""``RotatingPolicyKVCache``: mlx-lm ``RotatingKVCache`` with growth from ``RotatingPolicy``.

Single-row updates grow by zeros + concat until ``max_size`` rows, then write in place in a ring
that never overwrites the first ``keep`` rows. Multi-row updates rebuild the buffer: the rows in
temporal order, cut to ``max_size - 1`` (the ``keep`` first kept), concatenated with the new rows.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import RotatingKVCache

from policies.growth import Mechanism, RotatingPolicy
from policies.mlx_base import PolicyKVCache, check_kv_pair, check_trim, policy_from_meta, policy_meta


class RotatingPolicyKVCache(PolicyKVCache):
    """A sliding window of ``policy.max_size_rows`` rows keeping the first ``policy.keep_rows``."""

    policy_name = "rotating"

    # Pure index helpers and the mask, shared with mlx-lm (they read keep, offset, _idx, max_size).
    _trim = RotatingKVCache._trim
    _temporal_order = RotatingKVCache._temporal_order
    make_mask = RotatingKVCache.make_mask

    def __init__(self, policy: RotatingPolicy) -> None:
        super().__init__(policy)
        self._idx = 0

    @property
    def max_size(self) -> int:
        return self.policy.max_size_rows  # type: ignore[attr-defined]

    @property
    def keep(self) -> int:
        return self.policy.keep_rows  # type: ignore[attr-defined]

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        rows = self._rows(keys, values)
        if rows == 1:
            return self._update_in_place(keys, values)
        return self._update_concat(keys, values, rows)

    def _update_concat(self, keys: mx.array, values: mx.array, rows: int) -> tuple[mx.array, mx.array]:
        if self.keys is None:
            self.policy.grow(0, 0, rows)  # FRESH without zeros: the new rows are the buffer
            self.keys, self.values = keys, values
        else:
            self.keys = self._temporal_order(self.keys)
            self.values = self._temporal_order(self.values)
            self._idx = int(self.keys.shape[2])
            growth = self.policy.grow(self._idx, self._idx, rows)
            trim_rows = self._idx - growth.kept_rows  # type: ignore[union-attr]
            self.keys = self._trim(trim_rows, self.keys, keys)
            self.values = self._trim(trim_rows, self.values, values)
        self.offset += rows
        self._idx = int(self.keys.shape[2])
        return self.keys, self.values

    def _update_in_place(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        prev = self.offset
        growth = self.policy.grow(self.capacity_rows, prev, 1)
        if growth is not None:
            ext = growth.capacity_rows - growth.kept_rows
            new_k = mx.zeros((keys.shape[0], keys.shape[1], ext, keys.shape[3]), keys.dtype)
            new_v = mx.zeros((values.shape[0], values.shape[1], ext, values.shape[3]), values.dtype)
            if growth.mechanism is Mechanism.FRESH:
                self.keys, self.values = new_k, new_v
            else:
                self.keys = mx.concatenate([self.keys, new_k], axis=2)
                self.values = mx.concatenate([self.values, new_v], axis=2)
            self._idx = prev
        over_rows = self.keys.shape[2] - self.max_size
        if over_rows > 0:  # a prefill left more than max_size rows: cut back to the ring
            self.keys = self._trim(over_rows, self.keys)
            self.values = self._trim(over_rows, self.values)
            self._idx = self.max_size
        if self._idx == self.max_size:
            self._idx = self.keep
        self.keys[..., self._idx : self._idx + 1, :] = keys
        self.values[..., self._idx : self._idx + 1, :] = values
        self.offset += 1
        self._idx += 1
        return self.keys_and_values()

    def size(self) -> int:
        return min(self.offset, self.max_size)

    def is_trimmable(self) -> bool:
        return self.offset < self.max_size

    def trim(self, n: int) -> int:
        """Drop the last ``n`` rows (clamped); a cache that has wrapped cannot be trimmed."""
        n = check_trim(n)
        if n and not self.is_trimmable():
            raise ValueError(f"trim: a wrapped rotating cache (offset {self.offset} >= max_size {self.max_size}) cannot be trimmed")
        n = min(self.offset, n)
        self.offset -= n
        self._idx -= n
        return n

    @property
    def state(self) -> tuple[mx.array, mx.array]:
        if self.keys is None:
            raise ValueError("state: RotatingPolicyKVCache is empty")
        return self.keys_and_values()

    @state.setter
    def state(self, v: Any) -> None:
        self.keys, self.values = check_kv_pair(v)
        self._sig = None

    @property
    def meta_state(self) -> tuple[str, ...]:
        return (*policy_meta(self.policy), str(self.offset), str(self._idx))

    @meta_state.setter
    def meta_state(self, v: Any) -> None:
        self.policy = policy_from_meta(v, self.policy_name)
        if len(v) != 4:
            raise ValueError(f"meta_state: rotating needs (name, policy, offset, idx), got {len(v)} entries")
        try:
            self.offset, self._idx = int(v[2]), int(v[3])
        except ValueError:
            raise ValueError(f"meta_state: offset and idx must be integers, got {v[2]!r}, {v[3]!r}") from None
