"""What the sidebar returns: the scenario pieces every view reads (frozen, hashable)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DEFAULT_WORKLOAD: dict[str, int] = {"prompt_tokens": 2048, "prefill_chunk": 512, "decode_tokens": 512, "batch": 1}
DEFAULT_POLICIES: tuple[str, ...] = ("step", "geometric", "lowpeak")


@dataclass(frozen=True, slots=True)
class Inputs:
    """The user's choices, as JSON text so the whole object hashes.

    Args:
        base_json: A contract scenario object without ``id`` and ``policy``.
        policies_json: One contract ``policy`` object per compared policy.
        layers_json: The model's ``layers`` list (contract form), for ratio sweeps.
        memory_limit_bytes: The device or custom limit, or ``None``.
        weights_bytes: The model weights' size.
        errors: One-line messages of invalid inputs (views show them and stop).
        warnings: One-line messages worth showing without stopping.
    """

    base_json: str
    policies_json: tuple[str, ...]
    layers_json: str
    memory_limit_bytes: int | None = None
    weights_bytes: int = 0
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def base(self) -> dict[str, Any]:
        return json.loads(self.base_json)

    @property
    def policies(self) -> list[dict[str, Any]]:
        return [json.loads(p) for p in self.policies_json]

    @property
    def layers(self) -> list[dict[str, Any]]:
        return json.loads(self.layers_json)

    def scenario_objects(self, labels: list[str] | None = None) -> list[dict[str, Any]]:
        """Contract scenario objects, one per compared policy (``kvsim predict`` input).

        Args:
            labels: The ids to give them, in policy order; default ``policy0``, ``policy1``, ...
        """
        ids = labels or [f"policy{i}" for i in range(len(self.policies_json))]
        return [{**self.base, "id": sid, "policy": p} for sid, p in zip(ids, self.policies)]

    @property
    def kv_limit_bytes(self) -> int | None:
        """Bytes left for the KV cache and transients: the limit minus the weights."""
        if self.memory_limit_bytes is None:
            return None
        return self.memory_limit_bytes - self.weights_bytes


def make_inputs(
    base: dict[str, Any],
    policies: list[dict[str, Any]],
    layers: list[dict[str, Any]],
    memory_limit_bytes: int | None = None,
    weights_bytes: int = 0,
    errors: tuple[str, ...] = (),
    warnings: tuple[str, ...] = (),
) -> Inputs:
    """Build :class:`Inputs` from plain objects, checking the limit against the weights."""
    errors = tuple(errors)
    if memory_limit_bytes is not None and memory_limit_bytes <= weights_bytes:
        errors += (
            f"memory limit: {memory_limit_bytes / 2**30:,.1f} GiB is not above the model weights "
            f"({weights_bytes / 2**30:,.1f} GiB), so nothing is left for the KV cache",
        )
    if not policies:
        errors += ("policies: choose at least one policy to compare",)
    return Inputs(
        json.dumps(base, sort_keys=True),
        tuple(json.dumps(p, sort_keys=True) for p in policies),
        json.dumps(layers, sort_keys=True),
        memory_limit_bytes,
        weights_bytes,
        errors,
        warnings,
    )
