"""kvsim's growth policies as drop-in MLX caches (the only module family in ``policies`` importing MLX).

The engine-facing front door (the contract's ``from policies.mlx import cache_for``):
``cache_for(policy_dict)`` returns a fresh one-layer cache with mlx-lm's cache interface;
``make_prompt_cache(model, policy=...)`` builds a whole model's list (:mod:`policies.mlx_caches`);
``save_prompt_cache`` / ``load_prompt_cache`` keep the policy in prompt-cache files (:mod:`policies.mlx_files`),
and :func:`policies.mlx_install.install` makes mlx-lm itself build them.
"""

from __future__ import annotations

from policies.mlx_base import PolicyKVCache
from policies.mlx_batch import BatchPolicyKVCache
from policies.mlx_caches import (
    CLASSES,
    FullKVCache,
    GeometricKVCache,
    LowPeakKVCache,
    PreallocKVCache,
    StepKVCache,
    cache_for,
    make_prompt_cache,
)
from policies.mlx_files import convert_prompt_cache, load_prompt_cache, save_prompt_cache
from policies.mlx_quantized import QuantizedPolicyKVCache
from policies.mlx_rotating import RotatingPolicyKVCache

__all__ = [
    "CLASSES",
    "BatchPolicyKVCache",
    "FullKVCache",
    "GeometricKVCache",
    "LowPeakKVCache",
    "PolicyKVCache",
    "PreallocKVCache",
    "QuantizedPolicyKVCache",
    "RotatingPolicyKVCache",
    "StepKVCache",
    "cache_for",
    "convert_prompt_cache",
    "load_prompt_cache",
    "make_prompt_cache",
    "save_prompt_cache",
]
