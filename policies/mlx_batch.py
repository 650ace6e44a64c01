"""Batch caches for mlx-lm's ``BatchGenerator``: the policy's growth while batched, the policy back on ``extract``.

mlx-lm 0.32.2 batches history caches with ``type(cache).merge(caches)`` (``generate._merge_caches``) and hands
each finished sequence back with ``batch.extract(i)``. Its ``BatchKVCache.extract`` returns a plain ``KVCache``,
so a policy would be lost; these subclasses keep mlx-lm's padding, ``filter``, ``extend``, ``prepare``,
``finalize`` and masks, and only change how the buffer grows and what ``extract`` returns.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache

from policies.growth import Growth, GrowthPolicy
from policies.mlx_base import PolicyKVCache


def check_same_policy(caches: list[Any]) -> tuple[type, GrowthPolicy]:
    """Caches batched together must be one class with one policy (their extracts share it)."""
    if not caches:
        raise ValueError("caches: merge needs at least one cache, got []")
    first = caches[0]
    for i, c in enumerate(caches):
        if type(c) is not type(first) or c.policy != first.policy:
            raise ValueError(
                f"caches[{i}]: a batch holds one policy; {type(c).__name__} with {c.policy} "
                f"cannot merge with {type(first).__name__} with {first.policy}"
            )
    return type(first), first.policy


class BatchPolicyKVCache(BatchKVCache):
    """mlx-lm ``BatchKVCache`` (left-padded rows) whose growth is ``policy.grow`` over the batch's rows.

    Growth runs the policy cache class's own ops (``_grow``/``_concat_grow``; lowpeak's barriers included):
    they read only ``keys``, ``values`` and ``capacity_rows``, which this class has too.
    """

    def __init__(self, left_padding: list[int], cache_cls: type[PolicyKVCache], policy: GrowthPolicy) -> None:
        super().__init__(left_padding)
        self.cache_cls = cache_cls  # the policy cache class ``extract`` returns
        self.policy = policy  # the growth policy, shared by every sequence of the batch

    @property
    def capacity_rows(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[2])

    @property
    def step(self) -> int | None:
        return getattr(self.policy, "step_rows", None)

    def _concat_grow(self, growth: Growth) -> None:
        self.cache_cls._concat_grow(self, growth)  # type: ignore[arg-type]

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """mlx-lm ``BatchKVCache.update_and_fetch`` with the policy deciding each growth."""
        prev, rows = self._idx, int(keys.shape[2])
        growth = self.policy.grow(self.capacity_rows, prev, rows)
        if growth is not None:
            self.cache_cls._grow(self, growth, keys, values, prev + rows)  # type: ignore[arg-type]
        self.offset = self.offset + rows
        self._idx += rows
        self.keys[..., prev : self._idx, :] = keys
        self.values[..., prev : self._idx, :] = values
        return self.keys_and_values()

    def extend(self, other: Any) -> None:
        """mlx-lm ``BatchKVCache.extend``, for a batch of the same policy only (its sequences would take it)."""
        if not isinstance(other, BatchPolicyKVCache) or other.policy != self.policy:
            found = getattr(other, "policy", type(other).__name__)
            raise ValueError(f"caches: a batch of {self.policy} cannot extend with {found}; install one policy for all")
        super().extend(other)

    def extract(self, idx: int) -> PolicyKVCache:
        """Sequence ``idx``'s live rows as a cache of the policy (mlx-lm returns a plain ``KVCache``)."""
        mx.eval(self.left_padding)
        padding = self.left_padding.tolist()[idx]
        keys = self.keys[idx : idx + 1, :, padding : self._idx]
        values = self.values[idx : idx + 1, :, padding : self._idx]
        return self.cache_cls.adopt(keys, values, self.policy)

    @classmethod
    def merge(cls, caches: list[Any]) -> BatchPolicyKVCache:
        """mlx-lm ``BatchKVCache.merge``: right-justify each history in one zero buffer, left padding noted."""
        cache_cls, policy = check_same_policy(caches)
        lengths = [c.size() for c in caches]
        max_rows = max(lengths)
        batch = cls([max_rows - n for n in lengths], cache_cls, policy)
        if max_rows == 0:
            return batch
        held = [c for c in caches if c.keys is not None]
        heads = max(c.keys.shape[1] for c in held)
        k_dim, v_dim, dtype = (
            max(c.keys.shape[3] for c in held),
            max(c.values.shape[3] for c in held),
            held[0].keys.dtype,
        )
        capacity = caches[0]._adopt_rows(max_rows)
        keys = mx.zeros((len(caches), heads, capacity, k_dim), dtype=dtype)
        values = mx.zeros((len(caches), heads, capacity, v_dim), dtype=dtype)
        for i, (n, c) in enumerate(zip(lengths, caches)):
            if c.keys is None:
                continue
            pad = max_rows - n
            keys[i : i + 1, :, pad : pad + c.offset] = c.keys[..., : c.offset, :]
            values[i : i + 1, :, pad : pad + c.offset] = c.values[..., : c.offset, :]
        batch.keys, batch.values = keys, values
        batch.offset += max_rows
        batch._idx = max_rows
        return batch
