"""Refuse scenarios whose simulation would not finish: too many steps evaluated op by op."""

from __future__ import annotations

from kvsim.scenario.parse import Scenario, ScenarioError

MAX_EVALUATED_STEPS = 20_000


def evaluated_steps(scenario: Scenario, limit: int = MAX_EVALUATED_STEPS) -> int:
    """Prefill chunks plus decode growth events of the busiest layer, counted up to ``limit + 1``."""
    w = scenario.workload
    prefill = -(-w.prompt_tokens // w.prefill_chunk)
    worst = 0
    for layer in set(scenario.model.layers):
        policy = scenario.layer_policy(layer)
        capacity = held = 0
        start = 0
        for n in w.prefill_tokens():
            rows = layer.rows_in_step(start, n)
            start += n
            grown = policy.grow(capacity, held, rows) if rows else None
            capacity = grown.capacity_rows if grown else capacity
            held = min(held + rows, capacity)
        grows, total_rows = 0, layer.rows_after(w.total_tokens)
        while held < total_rows and grows <= limit:
            grown = policy.grow(capacity, capacity if capacity else 0, 1)
            if grown is None:
                break
            held, capacity = max(held, capacity) + 1, grown.capacity_rows
            grows += 1
        worst = max(worst, grows)
    return prefill + worst


def check_cost(scenario: Scenario) -> None:
    """Raise ``ScenarioError`` naming the field that makes the run too long."""
    if -(-scenario.workload.prompt_tokens // scenario.workload.prefill_chunk) > MAX_EVALUATED_STEPS:
        raise ScenarioError(
            "workload.prefill_chunk", scenario.workload.prefill_chunk,
            f"gives more than {MAX_EVALUATED_STEPS} prefill steps; use larger chunks",
        )
    steps = evaluated_steps(scenario)
    if steps > MAX_EVALUATED_STEPS:
        raise ScenarioError(
            "policy", scenario.policy_dict(), f"grows more than {MAX_EVALUATED_STEPS} times in this workload",
        )
