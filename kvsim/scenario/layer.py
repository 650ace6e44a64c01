"""One model of a layer: which growth policy it runs and which buffers its cache holds.

The simulator (``kvsim.sim.engine``), the footprint (``kvsim.scenario.footprint``), the dashboard's Layers
view and the measured reference workload all ask this module, so they cannot disagree about a layer:

- a sliding-window layer runs mlx-lm's ``RotatingKVCache(max_size=window, keep=0)``, as every mlx-lm model's
  ``make_cache`` builds it (e.g. ``mlx_lm/models/gemma3_text.py``), unless the scenario's ``window_layers`` is
  ``"policy"``, which runs the scenario's policy on it too;
- a layer's cache holds K and V buffers, or one shared latent (``kv_buffers: 1``, ds4's compressed rows), each
  split into packed words, scales and biases under the ``quantized`` policy;
- a layer with ``extra_row_bytes`` holds one more float32 buffer grown in lockstep with its rows and read
  every step (ds4's lightning-indexer keys, ``ds4.c`` ``metal_graph_alloc_raw_cap``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvsim.scenario.spec import LayerSpec
from policies.growth import GrowthPolicy, QuantizedPolicy, RotatingPolicy
from policies.parse import policy_from_dict

WINDOW_LAYERS = ("rotating", "policy")
"""How sliding-window layers run: mlx-lm's rotating cache (the default), or the scenario's policy."""

KV_BUFFERS = (1, 2)
"""Buffers of attention rows per layer: one shared latent (ds4) or separate K and V (mlx-lm)."""

QUANT_PARTS = ("packed", "scales", "biases")
PACKED_ITEMSIZE_BYTES = 4  # a quantized cache's packed words are uint32 (mlx-lm QuantizedKVCache)
COMPANION = "index"
"""Name of the float32 companion buffer that ``extra_row_bytes`` describes."""
COMPANION_ITEMSIZE_BYTES = 4


@dataclass(frozen=True, slots=True)
class LayerBuffer:
    """One buffer of a layer's cache, grown row by row with the others."""

    name: str
    """``K``, ``V``, ``KV`` (a shared latent), a quantized part such as ``K.scales``, or ``index``."""
    row_bytes: int
    """Bytes one row of capacity costs in this buffer, batch included."""
    itemsize_bytes: int
    """Bytes per element (the cache dtype's, 4 for packed words and the companion)."""


def layer_policy(
    policy_dict: Mapping[str, Any], layer: LayerSpec, context_tokens: int, *, window_layers: str = "rotating"
) -> GrowthPolicy:
    """The growth policy one layer runs.

    A sliding-window layer runs ``RotatingPolicy(window)`` when ``window_layers`` is ``"rotating"`` (mlx-lm's
    ``make_cache``); every other layer runs the scenario's policy, sized for its ratio and the context.
    """
    if window_layers == "rotating" and layer.window_rows is not None:
        return RotatingPolicy(max_size_rows=layer.window_rows)
    return policy_from_dict(policy_dict, ratio=layer.ratio, context_tokens=context_tokens)


def layer_buffers(layer: LayerSpec, policy: GrowthPolicy, *, batch: int = 1, kv_buffers: int = 2) -> tuple[LayerBuffer, ...]:
    """The buffers one layer's cache holds, in the order its update writes them."""
    isz = layer.itemsize_bytes
    names = ("K", "V") if kv_buffers == 2 else ("KV",)
    if isinstance(policy, QuantizedPolicy):
        packed, scales, biases = policy.component_row_bytes(layer.kv_heads, layer.head_dim, isz)
        parts = ((QUANT_PARTS[0], packed, PACKED_ITEMSIZE_BYTES), (QUANT_PARTS[1], scales, isz), (QUANT_PARTS[2], biases, isz))
        buffers = tuple(LayerBuffer(f"{kv}.{n}", b * batch, s) for kv in names for n, b, s in parts)
    else:
        buffers = tuple(LayerBuffer(kv, layer.row_bytes * batch, isz) for kv in names)
    if layer.extra_row_bytes:
        buffers += (LayerBuffer(COMPANION, layer.extra_row_bytes * batch, COMPANION_ITEMSIZE_BYTES),)
    return buffers


def row_bytes(layer: LayerSpec, policy: GrowthPolicy, *, kv_buffers: int = 2, include_extra: bool = True) -> int:
    """Bytes one row of capacity costs across the layer's buffers (batch 1)."""
    return sum(b.row_bytes for b in layer_buffers(layer, policy, kv_buffers=kv_buffers)
               if include_extra or b.name != COMPANION)


def layer_problem(layer: LayerSpec, policy: GrowthPolicy) -> tuple[str, Any, str] | None:
    """Why a layer cannot run ``policy`` as (field, value, problem), or ``None``.

    A rotating cache overwrites rows in place, so a companion grown in lockstep has no rows to follow; the
    companion holds whole float32 elements.
    """
    if layer.extra_row_bytes and isinstance(policy, RotatingPolicy):
        return "extra_row_bytes", layer.extra_row_bytes, "a sliding-window (rotating) layer cannot hold companion rows"
    if layer.extra_row_bytes % COMPANION_ITEMSIZE_BYTES:
        return "extra_row_bytes", layer.extra_row_bytes, "must be whole float32 elements (a multiple of 4)"
    return None
