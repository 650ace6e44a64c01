"""What a simulation returns: a run-length timeline, growth events and a summary."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TimelineRun:
    """``step_count`` consecutive steps with identical memory counters.

    Steps in which nothing grows repeat the same counters, so a million-token decode
    is a handful of runs. Bytes are relative to the workload's baseline, as measured.

    Args:
        first_step: Index of the run's first step.
        step_count: Steps in the run.
        first_token: Tokens processed before the run's first step.
        tokens_per_step: Tokens each step of the run feeds.
        active_bytes: ``mx.get_active_memory()`` after each step.
        buffer_cache_bytes: ``mx.get_cache_memory()`` after each step.
        peak_bytes: Each step's own ``mx.get_peak_memory()``.
        reserved_rows: Rows of KV capacity summed over layers (K and V counted once).
        kv_bytes: Bytes of KV-cache buffers (capacity, all layers, K and V).
        grew: Whether a growth event happened in these steps.
    """

    first_step: int
    step_count: int
    first_token: int
    tokens_per_step: int
    active_bytes: int
    buffer_cache_bytes: int
    peak_bytes: int
    reserved_rows: int
    kv_bytes: int
    grew: bool = False

    def steps(self) -> Iterator[tuple[int, int]]:
        """(step index, tokens before the step) for each step of the run."""
        for i in range(self.step_count):
            yield self.first_step + i, self.first_token + i * self.tokens_per_step


def step_peaks_bytes(timeline: Iterable[TimelineRun]) -> dict[int, int]:
    """Each step's own peak, by step index, from a run-length timeline."""
    return {i: run.peak_bytes for run in timeline for i, _ in run.steps()}


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One allocation-level event of a growth step.

    ``kind`` is ``alloc``, ``free`` or ``copy``; ``buffer`` names the array (``K``, ``V``,
    or a quantized component such as ``K.scales``); ``time_s`` is simulated time within the
    step (dispatch order on the host, completion on the device).
    """

    step: int
    layer: int
    kind: str
    buffer: str
    size_bytes: int
    time_s: float
    active_bytes: int


@dataclass(frozen=True, slots=True)
class Summary:
    """Headline numbers of a run (bytes relative to the baseline)."""

    peak_bytes: int
    peak_step: int
    final_active_bytes: int
    final_kv_bytes: int
    steady_kv_bytes: int
    grow_events: int
    bytes_copied: int
    over_allocation_bytes: int
    peak_low_bytes: int
    peak_high_bytes: int
    first_step_over_limit: int | None
    decode_step_s: float | None = None
    growth_step_s: float | None = None


@dataclass(frozen=True, slots=True)
class SimResult:
    scenario_id: Any
    backend: str
    policy: str
    timeline: Sequence[TimelineRun]  # a tuple, or fast mode's kvsim.sim.timeline.Timeline (runs made when read)
    events: tuple[MemoryEvent, ...]
    summary: Summary

    def to_prediction(self) -> dict[str, Any]:
        """The contract's `kvsim predict` line (section 1)."""
        s = self.summary
        out: dict[str, Any] = {
            "id": self.scenario_id,
            "backend": self.backend,
            "peak_bytes": s.peak_bytes,
            "final_active_bytes": s.final_active_bytes,
            "peak_low_bytes": s.peak_low_bytes,
            "peak_high_bytes": s.peak_high_bytes,
        }
        out.update({k: v for k, v in asdict(s).items() if k not in out})
        out["policy"] = self.policy
        return out
