"""Per-layer capacity vs used rows at a chosen token (pure footprint arithmetic, no simulation)."""

from __future__ import annotations

from typing import Any

from kvsim.scenario.footprint import growth_events
from kvsim.scenario.layer import row_bytes
from kvsim.scenario.parse import Scenario, Workload
from kvsim.scenario.spec import LayerSpec


def steps_through(workload: Workload, token: int) -> list[int]:
    """Tokens of each whole step fed by the time ``token`` tokens are processed."""
    steps: list[int] = []
    done = 0
    prefill = Workload(workload.prompt_tokens, workload.prefill_chunk, 0, workload.batch)
    for n in prefill.step_tokens():
        if done + n > token:
            return steps
        steps.append(n)
        done += n
    steps.extend([1] * max(0, min(token, workload.total_tokens) - done))
    return steps


def layer_rows(scenario: Scenario, token: int) -> list[dict[str, Any]]:
    """One record per layer: used and capacity rows and bytes (every buffer, batch included) at ``token``.

    Each layer runs the policy and holds the buffers ``kvsim.scenario.layer`` gives it, as the simulator does.
    """
    steps = steps_through(scenario.workload, token)
    fed = sum(steps)
    batch = scenario.workload.batch
    memo: dict[LayerSpec, tuple[int, int, int]] = {}
    out: list[dict[str, Any]] = []
    for i, layer in enumerate(scenario.model.layers):
        if layer not in memo:
            policy = scenario.layer_policy(layer)
            events = growth_events(policy, layer, steps)
            capacity = events[-1][1] if events else 0
            used = layer.rows_after(fed)
            if layer.window_rows is not None:
                used = min(used, capacity)
            memo[layer] = (used, capacity, row_bytes(layer, policy, kv_buffers=scenario.model.kv_buffers) * batch)
        used, capacity, per_row = memo[layer]
        out.append(
            {
                "layer": i,
                "ratio": layer.ratio,
                "window_rows": layer.window_rows,
                "used_rows": used,
                "capacity_rows": capacity,
                "used_bytes": used * per_row,
                "capacity_bytes": capacity * per_row,
            }
        )
    return out
