"""Production KV-cache growth policies.

``policies.growth`` and ``policies.parse`` are pure arithmetic (no MLX import);
``policies.mlx`` holds drop-in MLX caches built on them.
"""

from policies.growth import (
    FullPolicy,
    GeometricPolicy,
    Growth,
    GrowthPolicy,
    LowPeakPolicy,
    Mechanism,
    PagedPolicy,
    PreallocPolicy,
    QuantizedPolicy,
    RotatingPolicy,
    StepPolicy,
)
from policies.parse import POLICY_NAMES, PolicyError, policy_from_dict

__all__ = [
    "POLICY_NAMES",
    "FullPolicy",
    "GeometricPolicy",
    "Growth",
    "GrowthPolicy",
    "LowPeakPolicy",
    "Mechanism",
    "PagedPolicy",
    "PolicyError",
    "PreallocPolicy",
    "QuantizedPolicy",
    "RotatingPolicy",
    "StepPolicy",
    "policy_from_dict",
]
