"""A host-speed probe: one fixed small workload's decode-step time, measured beside every calibration run.

Decode steps of the reference workload are mostly host time (Python building the graph, MLX
launching kernels), so the same scenario runs up to 1.5x slower on one lent H200 host than on
another, and a host can switch between a fast and a slow state between runs. Each run records the
probe measured just before it (``host_probe_s``); a file is one host, whose speed is the 10th
percentile of its runs' probes (its fast state, ``kvsim.calibration.validate.host_probes_s``). A profile records
the probe of the host its time model was fitted on (``BackendProfile.host_probe_s``), so measured
step times from any host are compared with the model in the fitting host's time:
``measured x profile probe / the file's probe``.
"""

from __future__ import annotations

import statistics
from typing import Any

from kvsim.calibration.sweep import M12
from kvsim.scenario.parse import Scenario, parse_scenario

PROBE_SCENARIO: dict[str, Any] = {
    "id": "host-probe",
    "model": M12,
    "policy": {"name": "step", "step": 256},
    "workload": {"prompt_tokens": 256, "prefill_chunk": 256, "decode_tokens": 32, "batch": 1},
    "consumer": "last_row",
}


def probe_scenario(backend: str) -> Scenario:
    """The probe workload: the reference model (12 layers, 8 heads of 128, fp16), 32 decode steps."""
    return parse_scenario(PROBE_SCENARIO, backend=backend)


def measure_probe_s(backend: str) -> float:
    """Median decode-step wall time of the probe workload on the current MLX device (seconds)."""
    from kvsim.calibration.measure import run_reference

    steps = run_reference(probe_scenario(backend)).steps
    return statistics.median(s.wall_s for s in steps if s.tokens == 1)


def host_scale(reference_probe_s: float, run_probe_s: float | None) -> float:
    """Factor that turns step times measured at ``run_probe_s`` into the reference host's time (1
    without a probe)."""
    if not reference_probe_s or not run_probe_s:
        return 1.0
    return reference_probe_s / run_probe_s
