"""Shared parts of kvsim's MLX KV caches: input checks, policy (de)serialisation, the base class.

Every cache here has mlx-lm 0.32.2's cache interface (``update_and_fetch``, ``state`` in mlx-lm's
form, ``from_state``, ``trim``, ``is_trimmable``, ``make_mask``, ``size``, ``empty``, ``nbytes``,
``offset``, ``step``), plus ``meta_state`` (the policy as strings), pickles and deep-copies, and takes
every capacity decision from a :mod:`policies.growth` policy object.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import create_attention_mask

from policies import growth as _growth
from policies.growth import Growth, GrowthPolicy, Mechanism
from policies.parse import rows_field

POLICY_CLASSES: dict[str, type] = {
    "step": _growth.StepPolicy,
    "prealloc": _growth.PreallocPolicy,
    "geometric": _growth.GeometricPolicy,
    "full": _growth.FullPolicy,
    "paged": _growth.PagedPolicy,
    "rotating": _growth.RotatingPolicy,
    "quantized": _growth.QuantizedPolicy,
    "lowpeak": _growth.LowPeakPolicy,
}


def policy_meta(policy: GrowthPolicy) -> tuple[str, str]:
    """A policy as two strings (``meta_state`` must be strings to fit safetensors metadata)."""
    fields = {f.name: getattr(policy, f.name) for f in dataclasses.fields(policy)}  # type: ignore[arg-type]
    name = fields.pop("name")
    return name, json.dumps({k: (v.value if isinstance(v, Mechanism) else v) for k, v in fields.items()}, sort_keys=True)


def policy_from_meta(meta: Any, expected_name: str) -> GrowthPolicy:
    """Inverse of :func:`policy_meta`; the policy must be ``expected_name``.

    Raises:
        ValueError: a one-line message when ``meta`` is malformed or names another policy.
    """
    if not isinstance(meta, (tuple, list)) or len(meta) < 2 or not all(isinstance(x, str) for x in meta[:2]):
        raise ValueError(f"meta_state: must start with (policy name, policy JSON), got {meta!r}")
    name, fields_json = meta[0], meta[1]
    if name != expected_name:
        raise ValueError(f"meta_state: state of policy {name!r} cannot load into a {expected_name!r} cache")
    try:
        fields = json.loads(fields_json)
        if "mechanism" in fields:
            fields["mechanism"] = Mechanism(fields["mechanism"])
        return POLICY_CLASSES[name](**fields)
    except (ValueError, TypeError) as err:
        raise ValueError(f"meta_state: bad {name!r} policy fields {fields_json!r} ({err})") from None


def _shape(x: Any) -> Any:
    return tuple(x.shape) if isinstance(x, mx.array) else type(x).__name__


def check_update(keys: Any, values: Any, held_keys: mx.array | None, held_values: mx.array | None) -> int:
    """Validate one ``update_and_fetch`` call; return the number of new rows.

    Raises:
        ValueError: naming the argument and the mismatch on one line.
    """
    for label, x in (("keys", keys), ("values", values)):
        if not isinstance(x, mx.array) or x.ndim != 4:
            raise ValueError(f"{label}: must be a 4-D mx.array (batch, kv_heads, rows, head_dim), got {_shape(x)}")
    if keys.shape[:3] != values.shape[:3]:
        raise ValueError(f"values: shape {tuple(values.shape)} does not match keys {tuple(keys.shape)} in (batch, kv_heads, rows)")
    if keys.shape[2] < 1:
        raise ValueError(f"keys: must hold at least one row, got shape {tuple(keys.shape)}")
    for label, new, held in (("keys", keys, held_keys), ("values", values, held_values)):
        if held is None:
            continue
        if (new.shape[0], new.shape[1], new.shape[3]) != (held.shape[0], held.shape[1], held.shape[3]):
            raise ValueError(
                f"{label}: shape {tuple(new.shape)} does not match the held (batch, kv_heads, head_dim) "
                f"{(held.shape[0], held.shape[1], held.shape[3])}"
            )
        if new.dtype != held.dtype:
            raise ValueError(f"{label}.dtype: cache holds {held.dtype}, got {new.dtype}")
    return int(keys.shape[2])


def check_trim(n: Any) -> int:
    """A trim count must be a non-negative integer."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"trim: n must be a non-negative integer, got {n!r}")
    return n


def check_kv_pair(state: Any, where: str = "state") -> tuple[mx.array, mx.array]:
    """``(keys, values)`` of two 4-D arrays agreeing in (batch, kv_heads, rows)."""
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise ValueError(f"{where}: must be (keys, values), got {type(state).__name__} of length {length_of(state)}")
    keys, values = state
    for label, x in (("keys", keys), ("values", values)):
        if not isinstance(x, mx.array) or x.ndim != 4:
            raise ValueError(f"{where}.{label}: must be a 4-D mx.array, got {_shape(x)}")
    if keys.shape[:3] != values.shape[:3]:
        raise ValueError(f"{where}.values: shape {tuple(values.shape)} does not match keys {tuple(keys.shape)}")
    return keys, values


def check_plain_state(state: Any) -> tuple[Any, Any, int]:
    """mlx-lm 0.32.2 ``KVCache.state``: ``(keys, values, offset)``, ``offset`` within the buffer's rows.

    ``(None, None, 0)`` is an empty cache; ``(keys, values)`` (the newer two-part form) means every row is live.
    """
    if isinstance(state, (tuple, list)) and len(state) == 3 and state[0] is None and state[1] is None:
        if state[2] != 0:
            raise ValueError(f"state.offset: an empty cache has offset 0, got {state[2]!r}")
        return None, None, 0
    if isinstance(state, (tuple, list)) and len(state) == 2:
        keys, values = check_kv_pair(state)
        return keys, values, int(keys.shape[2])
    if not isinstance(state, (tuple, list)) or len(state) != 3:
        raise ValueError(f"state: must be (keys, values, offset), got {type(state).__name__} of length {length_of(state)}")
    keys, values = check_kv_pair(state[:2])
    return keys, values, check_offset(state[2], int(keys.shape[2]))


def check_offset(offset: Any, rows: int, where: str = "state.offset") -> int:
    """An offset is an integer in ``[0, rows]`` (the buffer's rows)."""
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= rows:
        raise ValueError(f"{where}: must be an integer in [0, {rows}] (the buffer's rows), got {offset!r}")
    return offset


def length_of(x: Any) -> Any:
    """``len(x)`` for an error message, ``"n/a"`` when it has none."""
    try:
        return len(x)
    except TypeError:
        return "n/a"


class PolicyKVCache:
    """A contiguous K/V cache whose growth is decided by ``policy.grow``.

    Invariant: ``offset <= capacity_rows``; rows ``[0, offset)`` of ``keys``/``values`` are live.
    Subclasses set ``policy_name`` and may override :meth:`_concat_grow` (how the buffers grow).
    """

    policy_name: str = ""

    def __init__(self, policy: GrowthPolicy) -> None:
        if policy.name != self.policy_name:
            raise ValueError(f"policy: {type(self).__name__} needs a {self.policy_name!r} policy, got {policy.name!r}")
        self.policy = policy
        self.keys: Any = None
        self.values: Any = None
        self.offset = 0
        self._sig: tuple[Any, ...] | None = None

    # -- growth ---------------------------------------------------------------------------------
    @property
    def capacity_rows(self) -> int:
        """Rows the buffers can hold (0 before the first update)."""
        return 0 if self.keys is None else int(self.keys.shape[2])

    def _rows(self, keys: mx.array, values: mx.array) -> int:
        """Rows of a valid update: a cached signature check per step, the full check otherwise."""
        try:
            ks, vs = keys.shape, values.shape
            sig = (ks[0], ks[1], ks[3], keys.dtype, vs[0], vs[1], vs[3], values.dtype)
            if sig == self._sig and len(ks) == 4 and len(vs) == 4 and ks[2] == vs[2] > 0:
                return int(ks[2])
        except (AttributeError, IndexError, TypeError):
            pass
        rows = check_update(keys, values, self.keys, self.values)
        ks, vs = keys.shape, values.shape
        self._sig = (ks[0], ks[1], ks[3], keys.dtype, vs[0], vs[1], vs[3], values.dtype)
        return rows

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Append ``keys``/``values`` (B, H, rows, D) and return all live rows."""
        rows = self._rows(keys, values)
        prev = self.offset
        growth = self.policy.grow(self.capacity_rows, prev, rows)
        if growth is not None:
            self._grow(growth, keys, values, prev + rows)
        self.offset += rows
        self.keys[..., prev : self.offset, :] = keys
        self.values[..., prev : self.offset, :] = values
        return self.keys_and_values()

    def _grow(self, growth: Growth, keys: mx.array, values: mx.array, need_rows: int) -> None:
        if growth.capacity_rows < need_rows:
            raise ValueError(f"policy: {self.policy.name} grew to {growth.capacity_rows} rows, {need_rows} needed")
        if growth.mechanism is Mechanism.FRESH:
            self.keys = mx.zeros(_rows_shape(keys, growth.capacity_rows), keys.dtype)
            self.values = mx.zeros(_rows_shape(values, growth.capacity_rows), values.dtype)
        elif growth.mechanism in (Mechanism.CONCAT, Mechanism.REALLOC):
            # REALLOC on MLX is the same op: concat(live prefix, zeros); the old buffer is freed after.
            self._concat_grow(growth)
        else:
            raise ValueError(f"policy: mechanism {growth.mechanism.value!r} has no MLX cache")

    def _concat_grow(self, growth: Growth) -> None:
        """mlx-lm ``KVCache``'s op order: zeros K, zeros V, prefix slices, concat K, concat V."""
        ext = growth.capacity_rows - growth.kept_rows
        new_k = mx.zeros(_rows_shape(self.keys, ext), self.keys.dtype)
        new_v = mx.zeros(_rows_shape(self.values, ext), self.values.dtype)
        if growth.kept_rows != self.capacity_rows:
            self.keys = self.keys[..., : growth.kept_rows, :]
            self.values = self.values[..., : growth.kept_rows, :]
        self.keys = mx.concatenate([self.keys, new_k], axis=2)
        self.values = mx.concatenate([self.values, new_v], axis=2)

    # -- reads ------------------------------------------------------------------------------------
    def keys_and_values(self) -> tuple[mx.array, mx.array]:
        if self.offset < self.keys.shape[2]:
            return self.keys[..., : self.offset, :], self.values[..., : self.offset, :]
        return self.keys, self.values

    def size(self) -> int:
        return self.offset

    def empty(self) -> bool:
        return self.keys is None

    @property
    def nbytes(self) -> int:
        """Bytes of the whole capacity (as mlx-lm reports it), not just the live rows."""
        return 0 if self.keys is None else self.keys.nbytes + self.values.nbytes

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> Any:  # noqa: N803
        """The attention mask for ``N`` new rows, as mlx-lm's ``KVCache.make_mask``."""
        return create_attention_mask(N, offset=self.offset, return_array=return_array, window_size=window_size)

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        """Drop the last ``n`` rows; like mlx-lm, clamps to the rows held and returns the count dropped."""
        n = min(self.offset, check_trim(n))
        self.offset -= n
        return n

    # -- copying and batching -------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """Pickle/deepcopy without the cached update signature (it holds ``mx.Dtype``s, which do not pickle)."""
        return {**self.__dict__, "_sig": None}

    @property
    def step(self) -> int | None:
        """Rows one growth rounds to (mlx-lm ``KVCache.step``); ``None`` for a policy without a step."""
        return getattr(self.policy, "step_rows", None)

    @step.setter
    def step(self, rows: Any) -> None:
        if not hasattr(self.policy, "step_rows"):
            raise ValueError(f"step: policy {self.policy.name!r} has no step, got {rows!r}")
        self.policy = dataclasses.replace(self.policy, step_rows=rows_field({"step": rows}, "step", "cache"))  # type: ignore[type-var]

    def _adopt_rows(self, rows: int) -> int:
        """Capacity for ``rows`` adopted rows (batch merge/extract): exact, as mlx-lm's; a policy that
        sizes its first buffer (prealloc, full, geometric) gets that buffer instead."""
        return rows

    @classmethod
    def adopt(cls, keys: mx.array, values: mx.array, policy: GrowthPolicy) -> PolicyKVCache:
        """A cache of ``policy`` holding exactly the rows ``keys``/``values`` (as mlx-lm's ``extract``)."""
        cache = cls(policy)  # type: ignore[call-arg]
        rows = int(keys.shape[2])
        extra = cache._adopt_rows(rows) - rows
        if extra > 0:
            keys = mx.concatenate([keys, mx.zeros(_rows_shape(keys, extra), keys.dtype)], axis=2)
            values = mx.concatenate([values, mx.zeros(_rows_shape(values, extra), values.dtype)], axis=2)
        cache.keys, cache.values, cache.offset = mx.contiguous(keys), mx.contiguous(values), rows
        return cache

    # -- serialisation (mlx-lm 0.32.2 forms) ------------------------------------------------------
    @property
    def state(self) -> tuple[Any, Any, int]:
        """``(keys, values, offset)`` with the whole buffers, as mlx-lm 0.32.2 ``KVCache.state``."""
        return self.keys, self.values, self.offset

    @state.setter
    def state(self, v: Any) -> None:
        self.keys, self.values, self.offset = check_plain_state(v)
        self._sig = None

    @property
    def meta_state(self) -> tuple[str, ...]:
        """``(policy name, policy JSON)``: strings, so they fit safetensors metadata."""
        return policy_meta(self.policy)

    @meta_state.setter
    def meta_state(self, v: Any) -> None:
        self.policy = policy_from_meta(v, self.policy_name)

    @classmethod
    def default_policy(cls, state: Any) -> GrowthPolicy:
        """The policy ``from_state`` uses without a meta state; only parameterless policies have one."""
        raise ValueError(f"meta_state: a {cls.policy_name!r} cache needs its policy (policy name, policy JSON), got None")

    @classmethod
    def from_state(cls, state: Any, meta_state: Any = None) -> PolicyKVCache:
        """A cache holding ``state`` (mlx-lm's one-argument call works); ``meta_state`` carries the policy."""
        obj = cls.__new__(cls)
        obj.keys, obj.values, obj.offset, obj._sig = None, None, 0, None
        if meta_state is None:
            obj.policy = cls.default_policy(state)
        else:
            obj.meta_state = meta_state
        obj.state = state
        return obj


def _rows_shape(x: mx.array, rows: int) -> tuple[int, int, int, int]:
    return (x.shape[0], x.shape[1], rows, x.shape[3])
