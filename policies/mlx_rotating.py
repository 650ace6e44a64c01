"""``RotatingPolicyKVCache``: mlx-lm ``RotatingKVCache`` with growth from ``RotatingPolicy``.

Single-row updates grow by zeros + concat until ``max_size`` rows, then write in place in a ring
that never overwrites the first ``keep`` rows. Multi-row updates rebuild the buffer: the rows in
temporal order, cut to ``max_size - 1`` (the ``keep`` first kept), concatenated with the new rows.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import BatchRotatingKVCache, RotatingKVCache

from policies.growth import GrowthPolicy, Mechanism, RotatingPolicy
from policies.mlx_base import PolicyKVCache, check_kv_pair, check_offset, check_trim, length_of
from policies.mlx_batch import check_same_policy
from policies.parse import policy_from_dict


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

    def to_quantized(self, group_size: int = 64, bits: int = 4) -> Any:
        raise NotImplementedError("RotatingKVCache Quantization NYI")  # as mlx-lm's RotatingKVCache

    @classmethod
    def merge(cls, caches: list[Any]) -> BatchRotatingPolicyKVCache:
        """mlx-lm ``RotatingKVCache.merge``; the batch's ``extract`` gives rotating policy caches back."""
        return BatchRotatingPolicyKVCache.merge(caches)

    @property
    def state(self) -> tuple[Any, ...]:
        """``(keys, values, offset, keep, max_size, _idx)``, as mlx-lm 0.32.2 ``RotatingKVCache.state``."""
        return self.keys, self.values, self.offset, self.keep, self.max_size, self._idx

    @state.setter
    def state(self, v: Any) -> None:
        if not isinstance(v, (tuple, list)) or len(v) != 6:
            raise ValueError(f"state: rotating needs (keys, values, offset, keep, max_size, idx), got {type(v).__name__} of length {length_of(v)}")
        keys, values = (None, None) if v[0] is None and v[1] is None else check_kv_pair(v[:2])
        offset, keep, max_size, idx = v[2:]
        if (keep, max_size) != (self.keep, self.max_size):
            raise ValueError(f"state: keep, max_size {(keep, max_size)!r} differ from the policy's {(self.keep, self.max_size)!r}")
        rows = 0 if keys is None else int(keys.shape[2])
        for label, x in (("offset", offset), ("idx", idx)):
            if isinstance(x, bool) or not isinstance(x, int) or x < 0:
                raise ValueError(f"state.{label}: must be a non-negative integer, got {x!r}")
        check_offset(idx, rows, "state.idx")
        self.keys, self.values, self.offset, self._idx = keys, values, offset, idx
        self._sig = None

    @classmethod
    def default_policy(cls, state: Any) -> RotatingPolicy:
        """Without a meta state the policy is the state's own ``max_size`` and ``keep`` (step 256)."""
        if not isinstance(state, (tuple, list)) or len(state) != 6:
            raise ValueError(f"state: rotating needs (keys, values, offset, keep, max_size, idx), got {type(state).__name__} of length {length_of(state)}")
        return policy_from_dict({"name": "rotating", "max_size": state[4], "keep": state[3]}, where="state")  # type: ignore[return-value]


class BatchRotatingPolicyKVCache(BatchRotatingKVCache):
    """mlx-lm ``BatchRotatingKVCache`` with the policy's ``step``; ``extract`` gives a rotating policy cache.

    As in mlx-lm, the batched ring keeps no ``keep`` rows; the extracted cache keeps ``policy.keep_rows``
    again from its next wrap.
    """

    def __init__(self, max_size: int, left_padding: list[int], policy: GrowthPolicy | None = None) -> None:
        super().__init__(max_size, left_padding)
        self.policy = policy  # the rotating policy (set by ``merge``)
        if policy is not None:
            self.step = policy.step_rows  # type: ignore[attr-defined]

    def extend(self, other: Any) -> None:
        """mlx-lm ``BatchRotatingKVCache.extend``, for a batch of the same policy only."""
        if not isinstance(other, BatchRotatingPolicyKVCache) or other.policy != self.policy:
            found = getattr(other, "policy", type(other).__name__)
            raise ValueError(f"caches: a batch of {self.policy} cannot extend with {found}; install one policy for all")
        super().extend(other)

    def extract(self, idx: int) -> PolicyKVCache:
        plain = super().extract(idx)
        cache = RotatingPolicyKVCache(self.policy)  # type: ignore[arg-type]
        cache.keys, cache.values, cache.offset, cache._idx = plain.keys, plain.values, plain.offset, plain._idx
        return cache

    @classmethod
    def merge(cls, caches: list[Any]) -> BatchRotatingPolicyKVCache:
        """mlx-lm ``BatchRotatingKVCache.merge`` (temporal order, right-justified), the policy kept."""
        _, policy = check_same_policy(caches)
        batch = super().merge(caches)
        batch.policy, batch.step = policy, policy.step_rows  # type: ignore[attr-defined]
        return batch
