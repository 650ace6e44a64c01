"""``QuantizedPolicyKVCache``: mlx-lm ``QuantizedKVCache`` with growth from ``QuantizedPolicy``.

Each of K and V is a tuple ``(packed uint32, scales, biases)``; a growth concatenates each of the
three with zeros (3 concats per K or V), exactly as mlx-lm's ``expand_quant`` does.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from policies.growth import Growth, Mechanism, QuantizedPolicy
from policies.mlx_base import PolicyKVCache, check_offset, check_update, length_of
from policies.parse import policy_from_dict

Triple = tuple[mx.array, mx.array, mx.array]


class QuantizedPolicyKVCache(PolicyKVCache):
    """Quantized K/V rows (``bits``, ``group_size`` from the policy); read with a quantized SDPA.

    ``bits`` and ``group_size`` are attributes because mlx-lm's attention picks its quantized
    kernel by ``hasattr(cache, "bits")``.
    """

    policy_name = "quantized"

    def __init__(self, policy: QuantizedPolicy) -> None:
        super().__init__(policy)

    @property
    def bits(self) -> int:
        return self.policy.bits  # type: ignore[attr-defined]

    @property
    def group_size(self) -> int:
        return self.policy.group_size  # type: ignore[attr-defined]

    @property
    def capacity_rows(self) -> int:
        return 0 if self.keys is None else int(self.keys[0].shape[2])

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Triple, Triple]:  # type: ignore[override]
        held_scales = (self.keys[1], self.values[1]) if self.keys is not None else (None, None)
        rows = check_update(keys, values, None, None)
        for label, x, scales in (("keys", keys, held_scales[0]), ("values", values, held_scales[1])):
            if x.shape[3] % self.group_size:
                raise ValueError(f"{label}: head_dim {x.shape[3]} is not a multiple of group_size {self.group_size}")
            if scales is not None and (x.shape[:2] != scales.shape[:2] or x.shape[3] // self.group_size != scales.shape[3]):
                raise ValueError(f"{label}: shape {tuple(x.shape)} does not match the held cache {tuple(scales.shape)}")
            if scales is not None and x.dtype != scales.dtype:
                raise ValueError(f"{label}.dtype: cache holds {scales.dtype}, got {x.dtype}")
        prev = self.offset
        growth = self.policy.grow(self.capacity_rows, prev, rows)
        if growth is not None:
            self._grow_quant(growth, keys, values, prev + rows)
        self.offset += rows
        qk = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        qv = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        for i in range(3):
            self.keys[i][..., prev : self.offset, :] = qk[i]
            self.values[i][..., prev : self.offset, :] = qv[i]
        return self.keys_and_values()

    def _grow_quant(self, growth: Growth, keys: mx.array, values: mx.array, need_rows: int) -> None:
        if growth.capacity_rows < need_rows:
            raise ValueError(f"policy: quantized grew to {growth.capacity_rows} rows, {need_rows} needed")
        shape = (keys.shape[0], keys.shape[1])
        if growth.mechanism is Mechanism.FRESH:
            self.keys = self._init_quant(shape, growth.capacity_rows, keys.shape[3], keys.dtype)
            self.values = self._init_quant(shape, growth.capacity_rows, values.shape[3], keys.dtype)
            return
        if growth.kept_rows != self.capacity_rows:
            self.keys = tuple(x[..., : growth.kept_rows, :] for x in self.keys)
            self.values = tuple(x[..., : growth.kept_rows, :] for x in self.values)
        ext = growth.capacity_rows - growth.kept_rows

        def expand(x: mx.array) -> mx.array:
            return mx.concatenate([x, mx.zeros((*x.shape[:2], ext, x.shape[3]), dtype=x.dtype)], axis=-2)

        self.keys = tuple(expand(x) for x in self.keys)
        self.values = tuple(expand(x) for x in self.values)

    def _init_quant(self, shape: tuple[int, int], rows: int, dim: int, dtype: mx.Dtype) -> Triple:
        el_per_int = 8 * mx.uint32.size // self.bits
        return (
            mx.zeros((*shape, rows, dim // el_per_int), dtype=mx.uint32),
            mx.zeros((*shape, rows, dim // self.group_size), dtype=dtype),
            mx.zeros((*shape, rows, dim // self.group_size), dtype=dtype),
        )

    def keys_and_values(self) -> tuple[Triple, Triple]:  # type: ignore[override]
        if self.offset == self.keys[0].shape[2]:
            return self.keys, self.values
        cut = self.offset
        return tuple(x[..., :cut, :] for x in self.keys), tuple(x[..., :cut, :] for x in self.values)  # type: ignore[return-value]

    @property
    def nbytes(self) -> int:
        return 0 if self.keys is None else sum(x.nbytes for x in (*self.keys, *self.values))

    @property
    def state(self) -> tuple[Any, ...]:
        """``(keys, values, offset, group_size, bits)`` with whole buffers, as mlx-lm 0.32.2 ``QuantizedKVCache``."""
        return self.keys, self.values, self.offset, self.group_size, self.bits

    @state.setter
    def state(self, v: Any) -> None:
        if not isinstance(v, (tuple, list)) or len(v) != 5:
            raise ValueError(f"state: quantized needs (keys, values, offset, group_size, bits), got {type(v).__name__} of length {length_of(v)}")
        if (v[3], v[4]) != (self.group_size, self.bits):
            raise ValueError(f"state: group_size, bits {(v[3], v[4])!r} differ from the policy's {(self.group_size, self.bits)!r}")
        if v[0] is None and v[1] is None:
            self.keys, self.values, self.offset = None, None, check_offset(v[2], 0)
            return
        for label, part in zip(("keys", "values"), v[:2]):
            ok = isinstance(part, (tuple, list)) and len(part) == 3
            if not ok or not all(isinstance(x, mx.array) and x.ndim == 4 for x in part):
                raise ValueError(f"state.{label}: must be 3 4-D arrays (packed, scales, biases), not a plain-cache state")
            if part[0].dtype != mx.uint32 or len({x.shape[2] for x in part}) != 1:
                raise ValueError(f"state.{label}: packed data must be uint32 with rows matching scales and biases")
        self.keys, self.values = tuple(v[0]), tuple(v[1])
        self.offset = check_offset(v[2], int(self.keys[0].shape[2]))

    @classmethod
    def default_policy(cls, state: Any) -> QuantizedPolicy:
        """Without a meta state the policy is the state's own ``group_size`` and ``bits`` (step 256)."""
        if not isinstance(state, (tuple, list)) or len(state) != 5:
            raise ValueError(f"state: quantized needs (keys, values, offset, group_size, bits), got {type(state).__name__} of length {length_of(state)}")
        return policy_from_dict({"name": "quantized", "group_size": state[3], "bits": state[4]}, where="state")  # type: ignore[return-value]
