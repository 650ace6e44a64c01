"""Provisioned KV-cache bytes: replay a growth policy over a workload's steps (pure, no MLX).

The bytes counted are the capacity each layer's buffers hold after the last step (what
an allocator has handed out), not the rows written. By default each layer holds the buffers the model
says (``ModelSpec.kv_buffers``: K and V, or ds4's shared latent); ``kv_buffers`` overrides it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvsim.scenario.layer import layer_policy, row_bytes
from kvsim.scenario.spec import LayerSpec, ModelSpec
from policies.growth import GrowthPolicy, RotatingPolicy


def chunk_tokens(tokens: int, step_tokens: int | None = None) -> list[int]:
    """Steps feeding ``tokens`` in chunks of ``step_tokens`` (one step when ``None``).

    Raises:
        ValueError: if ``tokens < 0`` or ``step_tokens < 1``.
    """
    if tokens < 0:
        raise ValueError(f"tokens: must be >= 0, got {tokens!r}")
    if step_tokens is None:
        return [tokens] if tokens else []
    if step_tokens < 1:
        raise ValueError(f"step_tokens: must be >= 1, got {step_tokens!r}")
    full, rest = divmod(tokens, step_tokens)
    return [step_tokens] * full + ([rest] if rest else [])


def growth_events(policy: GrowthPolicy, layer: LayerSpec, step_tokens: Iterable[int]) -> list[tuple[int, int]]:
    """Capacity after each growth event of one layer's buffer.

    Args:
        policy: The layer's growth policy.
        layer: The layer (its ratio sets the rows each step delivers).
        step_tokens: Tokens of each step in order.

    Returns:
        ``(token_index, capacity_rows)`` per event, where ``token_index`` is the number
        of tokens fed through the end of the step that caused it. A layer that receives
        no rows in a step is not updated in it (the contract's rule). A rotating cache's
        trim back to its window on a single-row update is an event too (its capacity
        shrinks); ``RotatingPolicy.grow`` alone does not report it.
    """
    events: list[tuple[int, int]] = []
    capacity = held = tokens = 0
    for n in step_tokens:
        add = layer.rows_in_step(tokens, n)
        tokens += n
        if add <= 0:
            continue
        grown = policy.grow(capacity, held, add)
        held += add
        if grown is not None:
            capacity = grown.capacity_rows
            events.append((tokens, capacity))
        elif add == 1 and isinstance(policy, RotatingPolicy) and capacity > policy.max_size_rows:
            capacity = policy.max_size_rows  # mlx-lm's _update_in_place trims a prefill's excess
            events.append((tokens, capacity))
    return events


def layer_capacity_rows(policy: GrowthPolicy, layer: LayerSpec, step_tokens: Iterable[int]) -> int:
    """A layer's buffer capacity in rows after feeding the steps (0 if it got no rows)."""
    events = growth_events(policy, layer, step_tokens)
    return events[-1][1] if events else 0


def provisioned_bytes_for_steps(
    model: ModelSpec,
    policy_dict: Mapping[str, Any],
    step_tokens: Sequence[int],
    *,
    context_tokens: int | None = None,
    kv_buffers: int | None = None,
    include_extra: bool = True,
    batch: int = 1,
    rotate_windows: bool = True,
) -> int:
    """Bytes of KV capacity across all layers after feeding ``step_tokens`` steps.

    Args:
        model: The model's KV-bearing layers.
        policy_dict: A contract ``policy`` object.
        step_tokens: Tokens of each step in order.
        context_tokens: Context used by ``full`` and ``cap: "context"`` unless the policy
            names its own; defaults to the tokens fed.
        kv_buffers: 2 for separate K and V buffers, 1 for a shared latent; default the model's.
        include_extra: Count each layer's ``extra_row_bytes`` (ds4's indexer rows).
        batch: Sequences per buffer (B); bytes scale linearly.
        rotate_windows: Sliding-window layers use mlx-lm's rotating cache.

    Raises:
        PolicyError: if ``policy_dict`` is invalid.
        ValueError: if ``kv_buffers`` is not 1 or 2 or ``batch < 1``.
    """
    kv_buffers = model.kv_buffers if kv_buffers is None else kv_buffers
    if kv_buffers not in (1, 2):
        raise ValueError(f"kv_buffers: must be 1 or 2, got {kv_buffers!r}")
    if batch < 1:
        raise ValueError(f"batch: must be >= 1, got {batch!r}")
    steps = list(step_tokens)
    context = sum(steps) if context_tokens is None else context_tokens
    total = 0
    cache: dict[LayerSpec, int] = {}  # identical layers replay once
    for layer in model.layers:
        if layer not in cache:
            policy = layer_policy(policy_dict, layer, context, window_layers="rotating" if rotate_windows else "policy")
            rows = layer_capacity_rows(policy, layer, steps)
            cache[layer] = rows * row_bytes(layer, policy, kv_buffers=kv_buffers, include_extra=include_extra)
        total += cache[layer]
    return total * batch


def provisioned_bytes(
    model: ModelSpec,
    policy_dict: Mapping[str, Any],
    tokens: int,
    *,
    step_tokens: int | None = None,
    context_tokens: int | None = None,
    kv_buffers: int | None = None,
    include_extra: bool = True,
    batch: int = 1,
    rotate_windows: bool = True,
) -> int:
    """Bytes of KV capacity after feeding ``tokens`` (in chunks of ``step_tokens`` if given).

    See :func:`provisioned_bytes_for_steps` for the other arguments.
    """
    return provisioned_bytes_for_steps(
        model,
        policy_dict,
        chunk_tokens(tokens, step_tokens),
        context_tokens=tokens if context_tokens is None else context_tokens,
        kv_buffers=kv_buffers,
        include_extra=include_extra,
        batch=batch,
        rotate_windows=rotate_windows,
    )


def full_bytes_per_token(model: ModelSpec, *, kv_buffers: int | None = None, include_extra: bool = True) -> float:
    """Bytes one token of context adds across the layers without a window (batch 1)."""
    return sum(
        ((model.kv_buffers if kv_buffers is None else kv_buffers) * lay.row_bytes
         + (lay.extra_row_bytes if include_extra else 0)) / lay.ratio
        for lay in model.layers
        if lay.window_rows is None
    )


def window_bytes(model: ModelSpec, *, kv_buffers: int | None = None) -> int:
    """Bytes the sliding-window layers hold once full (``window_rows`` each, batch 1)."""
    n = model.kv_buffers if kv_buffers is None else kv_buffers
    return sum(n * lay.row_bytes * lay.window_rows for lay in model.layers if lay.window_rows is not None)
