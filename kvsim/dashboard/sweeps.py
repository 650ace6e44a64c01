"""Sweeps and recommendations over policy parameters (pure; the simulator is passed in)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kvsim.core.units import GIB, MIB
from kvsim.scenario.parse import Scenario, parse_scenario
from kvsim.sim.result import SimResult
from policies.parse import PolicyError

Simulate = Callable[[Scenario, "int | None"], SimResult]
Progress = Callable[[int, int], None]
Record = dict[str, Any]
MAX_SWEEP_CELLS = 400
METRICS: dict[str, str] = {
    "peak_bytes": "peak (MiB)",
    "over_allocation_bytes": "over-allocation (MiB)",
    "grow_events": "growth events",
    "bytes_copied": "bytes copied (MiB)",
}
# Parameter values tried by the recommendation, per policy field.
CANDIDATES: dict[str, tuple[Any, ...]] = {
    "step": (64, 128, 256, 512, 1024, 2048),
    "seed_rows": (256, 1024, 4096),
    "factor": (1.5, 2),
    "max_size": (1024, 4096, 16384),
    "block_rows": (16, 64, 256),
}


def policy_label(policy: Mapping[str, Any]) -> str:
    """``geometric(seed_rows=256, factor=2)``: the name and every other field."""
    args = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(policy.items()) if k != "name")
    return f"{policy['name']}({args})"


def scenario_for(base: Mapping[str, Any], policy: Mapping[str, Any], sid: Any | None = None) -> Scenario:
    """The base scenario object with ``policy`` (and an id) substituted, parsed.

    Raises:
        PolicyError: (``ScenarioError`` included) naming the bad field.
    """
    return parse_scenario({**base, "policy": dict(policy), "id": policy_label(policy) if sid is None else sid})


def summary_record(label: str, result: SimResult) -> Record:
    """One table row: the label, the policy, every summary number and the growth steps."""
    return {"label": label, "policy": result.policy, **asdict(result.summary), "growth_steps": growth_steps(result)}


def parse_values(text: str, field: str, integer: bool = True, limit: int = 40) -> list[int | float]:
    """Comma-separated sweep values, e.g. ``"64, 256, 1024"``.

    Raises:
        ValueError: one line naming the field and the bad value.
    """
    values: list[int | float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            number = float(part)
        except ValueError:
            raise ValueError(f"{field}: must be numbers separated by commas, got {part!r}") from None
        if integer and not number.is_integer():
            raise ValueError(f"{field}: must be whole numbers, got {part!r}")
        values.append(int(number) if integer else number)
    if not values:
        raise ValueError(f"{field}: give at least one value, got {text!r}")
    if len(values) > limit:
        raise ValueError(f"{field}: at most {limit} values, got {len(values)}")
    return values


def grid_policies(
    policy: Mapping[str, Any], x_field: str, x_values: Sequence[Any], y_field: str | None, y_values: Sequence[Any]
) -> list[dict[str, Any]]:
    """One policy per cell of a one- or two-parameter grid (``y_field`` None), other fields kept."""
    if y_field is None:
        y_values = [None]
    if len(x_values) * len(y_values) > MAX_SWEEP_CELLS:
        raise ValueError(f"sweep: at most {MAX_SWEEP_CELLS} cells, got {len(x_values) * len(y_values)}")
    if y_field == x_field:
        raise ValueError(f"sweep: the two axes must be different fields, got {x_field!r} twice")
    cells = []
    for y in y_values:
        for x in x_values:
            cells.append({**policy, x_field: x} if y_field is None else {**policy, x_field: x, y_field: y})
    return cells


def run_policies(
    base: Mapping[str, Any],
    policies: Sequence[Mapping[str, Any]],
    simulate: Simulate,
    limit_bytes: int | None = None,
    progress: Progress | None = None,
) -> list[Record]:
    """Simulate the base scenario under each policy; invalid ones get an ``error`` record."""
    records: list[Record] = []
    for i, policy in enumerate(policies):
        label = policy_label(policy)
        try:
            records.append(summary_record(label, simulate(scenario_for(base, policy), limit_bytes)))
        except PolicyError as err:
            records.append({"label": label, "policy": policy["name"], "error": str(err)})
        if progress is not None:
            progress(i + 1, len(policies))
    return records


def with_ratio(layers: Sequence[Mapping[str, Any]], ratio: int) -> list[dict[str, Any]]:
    """Layers with ``ratio`` set on every compressed layer (ratio > 1), or on all if none is."""
    compressed = any(int(x.get("ratio", 1)) > 1 for x in layers)
    return [{**x, "ratio": ratio} if not compressed or int(x.get("ratio", 1)) > 1 else dict(x) for x in layers]


def ratio_sweep(
    base: Mapping[str, Any],
    layers: Sequence[Mapping[str, Any]],
    ratios: Sequence[int],
    policies: Sequence[Mapping[str, Any]],
    simulate: Simulate,
    limit_bytes: int | None = None,
    progress: Progress | None = None,
) -> list[Record]:
    """Every policy at each ratio; records carry ``ratio``."""
    records: list[Record] = []
    total, done = len(ratios) * len(policies), 0
    for ratio in ratios:
        model_base = {**base, "model": {"layers": with_ratio(layers, ratio)}}
        for record in run_policies(model_base, policies, simulate, limit_bytes):
            records.append({"ratio": ratio, **record})
            done += 1
            if progress is not None:
                progress(done, total)
    return records


def candidate_policies(policies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each policy as given, plus one variant per candidate value of each of its sweepable fields, taken
    in turn across the policies (every policy as given first): the recommendation is one sweep, cut as a
    whole when it runs out of time (``runner.Sweep``), so every policy gets its first cells tried."""
    out: dict[str, dict[str, Any]] = {}
    per_policy = [_variants(policy) for policy in policies]
    for rank in range(max((len(v) for v in per_policy), default=0)):
        for variants in per_policy:
            if rank < len(variants):
                out.setdefault(policy_label(variants[rank]), variants[rank])
    return list(out.values())


def _variants(policy: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The policy as given, then one variant per candidate value of each of its sweepable fields."""
    variants = [dict(policy)]
    for field, values in CANDIDATES.items():
        if field in policy:
            variants.extend({**policy, field: value} for value in values)
    return variants


@dataclass(frozen=True, slots=True)
class Constraints:
    """What a recommended setting must meet (``None``: no constraint)."""

    max_growth_steps: int | None = None
    """Steps in which some layer's cache grows: one per step however many layers grow in it, so a
    128K-token prompt in 2K chunks is 64 growth steps at 32 layers or 100 (``grow_events`` counts
    each layer's: 2,048 and 6,400)."""
    max_over_allocation_pct: float | None = None
    """KV capacity beyond the rows written at the end, in % of the bytes written."""
    limit_bytes: int | None = None
    """The peak must stay within this (the device limit minus the weights); the simulation was run
    with it, so a record past it carries ``first_step_over_limit``."""


def size_text(n_bytes: float) -> str:
    """``3.1 GiB`` from 1 GiB, else ``60.0 MiB``."""
    return f"{n_bytes / GIB:,.1f} GiB" if abs(n_bytes) >= GIB else f"{n_bytes / MIB:,.1f} MiB"


def growth_steps(result: SimResult) -> int:
    """Steps in which some layer's cache grew (each layer's growth is one of ``grow_events``)."""
    return sum(run.step_count for run in result.timeline if run.grew)


def over_allocation_pct(record: Record) -> float:
    """Capacity beyond the rows written at the end, in % of the KV bytes written."""
    written = record["final_kv_bytes"] - record["over_allocation_bytes"]
    return 100.0 * record["over_allocation_bytes"] / written if written > 0 else 0.0


def failures(record: Record, c: Constraints) -> list[str]:
    """Each constraint ``record`` misses, as a phrase with its figure and the bound (empty: it meets all)."""
    out = []
    if record.get("first_step_over_limit") is not None:
        limit = "the limit" if c.limit_bytes is None else f"the {size_text(c.limit_bytes)} limit"
        out.append(f"peak {size_text(record['peak_bytes'])} over {limit}")
    if c.max_over_allocation_pct is not None and (pct := over_allocation_pct(record)) > c.max_over_allocation_pct:
        out.append(f"over-allocation {pct:,.1f}% over the {c.max_over_allocation_pct:g}% allowed")
    if c.max_growth_steps is not None and record["growth_steps"] > c.max_growth_steps:
        out.append(f"{record['growth_steps']:,} growth steps, more than the {c.max_growth_steps:,} allowed")
    return out


def feasible(records: Sequence[Record], c: Constraints) -> list[Record]:
    """Valid records within the constraints, lowest peak first."""
    ok = [r for r in records if "error" not in r and not failures(r, c)]
    return sorted(ok, key=lambda r: (r["peak_bytes"], r["growth_steps"], r["label"]))


def recommend(records: Sequence[Record], c: Constraints) -> Record | None:
    """The feasible setting with the lowest peak, or ``None``."""
    ok = feasible(records, c)
    return ok[0] if ok else None


def why_none(records: Sequence[Record], c: Constraints) -> list[str]:
    """One line per policy saying what its closest candidate misses (fewest failed constraints, then
    lowest peak), e.g. ``step(step=2048): peak 21.1 GiB over the 16.0 GiB limit``; a policy whose
    every candidate failed to run gives its first error."""
    by_policy: dict[str, list[Record]] = {}
    for record in records:
        by_policy.setdefault(record["policy"], []).append(record)
    lines = []
    for name, group in by_policy.items():
        valid = [r for r in group if "error" not in r]
        if not valid:
            lines.append(f"{name}: {group[0]['error']}")
            continue
        best = min(valid, key=lambda r: (len(failures(r, c)), r["peak_bytes"], r["label"]))
        lines.append(f"{name}: {'; '.join(failures(best, c)) or 'meets them'} (closest: {best['label']})")
    return lines
