"""Human-readable views of a result: timeline rows and a text table."""

from __future__ import annotations

from typing import Any

from kvsim.sim.result import SimResult

MIB = 1 << 20


def timeline_rows(result: SimResult) -> list[dict[str, Any]]:
    """One dict per timeline run (steps with identical counters)."""
    return [
        {
            "first_step": r.first_step,
            "steps": r.step_count,
            "first_token": r.first_token,
            "tokens_per_step": r.tokens_per_step,
            "active_bytes": r.active_bytes,
            "buffer_cache_bytes": r.buffer_cache_bytes,
            "peak_bytes": r.peak_bytes,
            "kv_bytes": r.kv_bytes,
            "reserved_rows": r.reserved_rows,
            "grew": r.grew,
        }
        for r in result.timeline
    ]


def summary_table(result: SimResult, rows: list[dict[str, Any]]) -> str:
    s = result.summary
    lines = [
        f"scenario {result.scenario_id!r}  backend {result.backend}  policy {result.policy}",
        f"{'steps':>12} {'tokens':>10} {'active MiB':>11} {'peak MiB':>10} {'KV MiB':>9} {'cache MiB':>10}  grew",
    ]
    for r in rows:
        steps = f"{r['first_step']}" + (f"+{r['steps'] - 1}" if r["steps"] > 1 else "")
        lines.append(
            f"{steps:>12} {r['first_token']:>10} {r['active_bytes'] / MIB:>11.2f} {r['peak_bytes'] / MIB:>10.2f} "
            f"{r['kv_bytes'] / MIB:>9.2f} {r['buffer_cache_bytes'] / MIB:>10.2f}  {'*' if r['grew'] else ''}"
        )
    lines.append(
        f"peak {s.peak_bytes / MIB:.2f} MiB at step {s.peak_step} (range {s.peak_low_bytes / MIB:.2f}–"
        f"{s.peak_high_bytes / MIB:.2f}); final active {s.final_active_bytes / MIB:.2f} MiB; "
        f"{s.grow_events} grows, {s.bytes_copied / MIB:.1f} MiB copied, over-allocation "
        f"{s.over_allocation_bytes / MIB:.2f} MiB"
    )
    if s.first_step_over_limit is not None:
        lines.append(f"memory limit first exceeded at step {s.first_step_over_limit}")
    return "\n".join(lines) + "\n"
