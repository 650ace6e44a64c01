"""kvsim's growth policies as one-layer MLX caches with mlx-lm's interface: the plain policies' classes, the
registry of every policy's class, ``cache_for`` and ``make_prompt_cache``. ``policies.mlx`` re-exports them
with the prompt-cache files; every capacity decision comes from the :mod:`policies.growth` policy object, the
same arithmetic the simulator runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from policies.growth import (
    FullPolicy,
    GeometricPolicy,
    Growth,
    GrowthPolicy,
    LowPeakPolicy,
    PreallocPolicy,
    QuantizedPolicy,
    StepPolicy,
)
from policies.mlx_base import PolicyKVCache
from policies.mlx_batch import BatchPolicyKVCache
from policies.mlx_quantized import QuantizedPolicyKVCache
from policies.mlx_rotating import RotatingPolicyKVCache
from policies.parse import policy_from_dict


class _Quantizable(PolicyKVCache):
    """The plain (unquantized, contiguous) caches: ``to_quantized`` and ``merge`` as mlx-lm ``KVCache``'s."""

    def to_quantized(self, group_size: int = 64, bits: int = 4) -> QuantizedPolicyKVCache:
        """A quantized cache of the whole capacity buffer (step 256 from then on), as mlx-lm does."""
        quant = QuantizedPolicyKVCache(QuantizedPolicy(256, bits, group_size))
        quant.offset = self.offset
        if self.keys is not None:
            quant.keys = tuple(mx.quantize(self.keys, group_size=group_size, bits=bits))
            quant.values = tuple(mx.quantize(self.values, group_size=group_size, bits=bits))
        return quant

    @classmethod
    def merge(cls, caches: list[PolicyKVCache]) -> BatchPolicyKVCache:
        """One left-padded batch cache of ``caches`` (mlx-lm ``KVCache.merge``); its ``extract`` gives the policy back."""
        return BatchPolicyKVCache.merge(caches)


class _SizesFirstBuffer(_Quantizable):
    """A policy that sizes its first buffer: adopted rows (batch merge/extract) get that buffer."""

    def _adopt_rows(self, rows: int) -> int:
        return self.policy.grow(0, 0, rows).capacity_rows  # type: ignore[union-attr]


class StepKVCache(_Quantizable):
    """mlx-lm ``KVCache`` exactly (same ops, same memory), with ``step`` from the policy."""

    policy_name = "step"

    def __init__(self, policy: StepPolicy | None = None) -> None:
        super().__init__(policy or StepPolicy())

    @classmethod
    def default_policy(cls, state: Any) -> StepPolicy:
        return StepPolicy()


class PreallocKVCache(_SizesFirstBuffer):
    """mlx-lm PR #1038 ``KVCache(max_size=M)``: ``max(M, rows)`` zeros first, then step growth."""

    policy_name = "prealloc"

    def __init__(self, policy: PreallocPolicy) -> None:
        super().__init__(policy)


class GeometricKVCache(_SizesFirstBuffer):
    """Seed rows, then multiply capacity by ``factor`` (capped); growth by concat with zeros."""

    policy_name = "geometric"

    def __init__(self, policy: GeometricPolicy) -> None:
        super().__init__(policy)


class FullKVCache(_SizesFirstBuffer):
    """The whole context's rows on the first update; past it, exact-fit concat of the live rows."""

    policy_name = "full"

    def __init__(self, policy: FullPolicy) -> None:
        super().__init__(policy)


class LowPeakKVCache(_Quantizable):
    """Step arithmetic, but K and V each grow behind their own evaluation barrier.

    At a growth: ``new_k = concat([old_k prefix, zeros(ext)])``, ``mx.eval(new_k)``, drop
    ``old_k`` (freed now); the same for V; then the usual slice-update write. So only one buffer's
    old and new copies coexist, instead of every layer's within one lazy graph.
    """

    policy_name = "lowpeak"

    def __init__(self, policy: LowPeakPolicy | None = None) -> None:
        super().__init__(policy or LowPeakPolicy())

    @classmethod
    def default_policy(cls, state: Any) -> LowPeakPolicy:
        return LowPeakPolicy()

    def _concat_grow(self, growth: Growth) -> None:
        self.keys = _grown_now(self.keys, growth)  # old K freed here, before V is touched
        self.values = _grown_now(self.values, growth)


def _grown_now(old: mx.array, growth: Growth) -> mx.array:
    """``concat([old[..., :kept, :], zeros])`` evaluated at once; the caller drops ``old``."""
    ext_rows = growth.capacity_rows - growth.kept_rows
    prefix = old if growth.kept_rows == old.shape[2] else old[..., : growth.kept_rows, :]
    new = mx.concatenate([prefix, mx.zeros((old.shape[0], old.shape[1], ext_rows, old.shape[3]), old.dtype)], axis=2)
    mx.eval(new)
    return new


CLASSES: dict[str, type[PolicyKVCache]] = {
    "step": StepKVCache,
    "prealloc": PreallocKVCache,
    "geometric": GeometricKVCache,
    "full": FullKVCache,
    "lowpeak": LowPeakKVCache,
    "quantized": QuantizedPolicyKVCache,
    "rotating": RotatingPolicyKVCache,
}


def _needs_context(policy: Mapping[str, Any]) -> bool:
    if "context_tokens" in policy:
        return False
    return policy.get("name") == "full" or (policy.get("name") == "geometric" and policy.get("cap") == "context")


def cache_for(policy: Any, *, context_tokens: int | None = None, ratio: int = 1) -> PolicyKVCache:
    """A fresh one-layer cache for a contract ``policy`` object (scenario section 2).

    Args:
        policy: e.g. ``{"name": "lowpeak"}`` or ``{"name": "step", "step": 512}``.
        context_tokens: Tokens of the whole context; needed by ``full`` and ``cap: "context"``
            unless the policy names its own ``context_tokens``.
        ratio: The layer's compression ratio (it keeps one row per ``ratio`` tokens).

    Raises:
        ValueError: (``PolicyError``) a one-line message naming the bad field and value.
    """
    if isinstance(policy, Mapping) and context_tokens is None and _needs_context(policy):
        raise ValueError(
            f"policy.context_tokens: policy {policy.get('name')!r} sizes its cache from the context; "
            "pass cache_for(policy, context_tokens=N) or set policy.context_tokens, got None"
        )
    made: GrowthPolicy = policy_from_dict(policy, ratio=ratio, context_tokens=context_tokens)
    if made.name not in CLASSES:
        raise ValueError(f"policy.name: {made.name!r} has no MLX cache (known: {', '.join(CLASSES)}), got {made.name!r}")
    return CLASSES[made.name](made)  # type: ignore[call-arg]


def make_prompt_cache(model: Any, policy: Any = None, max_context: int | None = None) -> list[Any]:
    """A model's per-layer caches with ``policy`` in place of mlx-lm's plain ``KVCache``.

    When the model has ``make_cache()``, only its plain ``KVCache`` entries are replaced; sliding
    window (``RotatingKVCache``) and other special caches stay as the model made them. Otherwise
    one policy cache per layer.

    Args:
        model: An mlx-lm model.
        policy: A contract policy object; default ``{"name": "step"}`` (mlx-lm's behaviour).
        max_context: Context tokens, for ``full``/``cap: "context"``; also ``prealloc``'s
            ``max_size`` when the policy has none (as PR #1038's ``max_context``).
    """
    policy = dict(policy or {"name": "step"})
    if policy.get("name") == "prealloc" and "max_size" not in policy and max_context is not None:
        policy["max_size"] = max_context

    def fresh() -> PolicyKVCache:
        return cache_for(policy, context_tokens=max_context)

    if hasattr(model, "make_cache"):
        return [fresh() if type(c) is KVCache else c for c in model.make_cache()]
    return [fresh() for _ in range(len(model.layers))]
