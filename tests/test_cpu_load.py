"""CPU peaks on a busy host (``kvsim.sim.peak_range.load_range``, ``docs/validation.md``).

The event model plays a quiet host. On a busy one the host thread is descheduled while the CPU worker
completes the tasks in flight and frees their inputs: a loaded run's growth step peaks lower, and the
predicted CPU range holds it. Checked here: the range's arithmetic on a simulated timeline, that one
host stall in the model reproduces a loaded step's peak, the shipped load data (held-out runs never
fitted), that ``fit_load`` on the train split gives the shipped profile's fields, and real runs with busy
loops in other processes.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from kvsim.api import simulate
from kvsim.calibration.fit import fit_load
from kvsim.calibration.validate import load_observations, validate
from kvsim.core.paths import REPO_DIR
from kvsim.scenario.parse import parse_scenario
from kvsim.sim.engine import simulate_timeline
from kvsim.sim.peak_range import load_range, step_transients
from kvsim.sim.profile import load_profile
from kvsim.sim.result import step_peaks_bytes

LOAD_DIR = REPO_DIR / "data" / "cpu-load"
TRAIN_SOURCES = [REPO_DIR / "data" / "calibration" / "mlx-cpu-0.32.4-20261129.jsonl",
                 LOAD_DIR / "default-busy2"]  # the profile's load fields: their train split only
HELD_OUT_SOURCES = [d for d in (LOAD_DIR / "holdout-busy2", LOAD_DIR / "default-busy1") if d.is_dir()]  # never fitted

QUANT = {"id": "quant8g64s256-m12-p1024c512-d300",
         "model": {"n_layers": 12, "kv_heads": 8, "head_dim": 128, "dtype": "float16"},
         "policy": {"name": "quantized", "step": 256, "bits": 8, "group_size": 64},
         "workload": {"prompt_tokens": 1024, "prefill_chunk": 512, "decode_tokens": 300}}


def test_load_range_is_each_steps_settled_bytes_plus_a_share_of_its_transient() -> None:
    scenario = parse_scenario(QUANT)
    profile = load_profile("mlx-cpu")
    engine = simulate_timeline(scenario, profile, False)
    peaks = step_peaks_bytes(engine.timeline)
    active = {i: run.active_bytes for run in engine.timeline for i, _ in run.steps()}
    point = max(peaks.values())
    for share, margin in ((0.5, 0.01), (0.0, 0.0), (1.0, 0.02)):
        timed = replace(profile, load_transient_share=share, load_high_margin=margin)
        low, high = load_range(step_transients(engine.timeline), point, timed)
        settled = {i: max(active.get(i - 1, 0), active[i]) for i in peaks}
        expected = max(settled[i] + share * (peaks[i] - settled[i]) for i in peaks)
        assert low == min(-(-expected // 1), point)
        assert high == int(point * (1 + margin))
    quiet = replace(profile, load_transient_share=1.0, load_high_margin=0.0)
    assert load_range(step_transients(engine.timeline), point, quiet) == (point, point)


def test_one_host_stall_reproduces_a_loaded_growth_step() -> None:
    """Measured on this 2-core host with busy loops (data/cpu-load): the second decode growth of ``QUANT``
    (step 258) peaked at 59,002,968 B and 68,440,152 B in loaded runs, 71,585,956 B on a quiet host. A stall
    of the host thread before one op of the step (``host_stall_op``; ops 618 and 624 of its tape) gives each
    of them to 8 bytes. (All 828 positions give 40 distinct peaks, 55.9 to 71.6 MB.)"""
    scenario = parse_scenario(QUANT)
    profile = load_profile("mlx-cpu")
    quiet = step_peaks_bytes(simulate_timeline(scenario, profile, False).timeline)[258]
    assert abs(quiet - 71_585_956) <= 8
    stalled = {step_peaks_bytes(simulate_timeline(scenario, replace(profile, host_stall_op=k), False).timeline)[258]
               for k in range(600, 640)}
    for measured in (59_002_968, 68_440_152):
        assert min(abs(p - measured) for p in stalled) <= 8, (measured, sorted(stalled))
    engine = simulate_timeline(scenario, profile, False)
    settled = next(run.active_bytes for run in engine.timeline if run.first_step <= 258 < run.first_step + run.step_count)
    assert min(stalled) >= settled + 0.5 * (quiet - settled)  # a stall keeps at least half the transient


def test_shipped_profile_load_fields_come_from_the_train_split() -> None:
    _, observations = load_observations(TRAIN_SOURCES, backend="mlx-cpu")
    train = [o for o in observations if o.split == "train"]
    shipped = load_profile("mlx-cpu")
    fitted, _ = fit_load(train, replace(shipped, load_transient_share=1.0, load_high_margin=0.0), lambda _: None)
    assert (fitted.load_transient_share, fitted.load_high_margin) == (shipped.load_transient_share,
                                                                      shipped.load_high_margin)
    assert shipped.load_transient_share < 1.0


@pytest.mark.skipif(not HELD_OUT_SOURCES, reason="no held-out load data")
def test_held_out_loaded_runs_fall_in_the_range() -> None:
    _, observations = load_observations(HELD_OUT_SOURCES, backend="mlx-cpu")
    summary = validate(observations, load_profile("mlx-cpu"), "all")["summary"]
    assert summary["runs"] == sum(len(o.peaks_bytes) for o in observations) > 30
    assert summary["runs_in_range"] == summary["runs"]


BUSY_LOOP = "while True: pass"


def test_real_runs_with_busy_loops_fall_in_the_range() -> None:
    pytest.importorskip("mlx.core")
    from kvsim.calibration.measure import run_reference

    scenario = parse_scenario(QUANT)
    predicted = simulate(scenario).summary
    busy = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(2)]
    try:
        peaks = [run_reference(scenario).peak_bytes for _ in range(2)]
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    assert all(predicted.peak_low_bytes <= p <= predicted.peak_high_bytes for p in peaks), (
        predicted.peak_low_bytes, predicted.peak_bytes, predicted.peak_high_bytes, peaks)
