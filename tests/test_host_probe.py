"""The host-speed probe: measured on real MLX, each file's fast state, and step times put in the
fitting host's time by validate and fit."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvsim.calibration.datafile import FORMAT, write_jsonl_atomic
from kvsim.calibration.host_probe import host_scale, measure_probe_s, probe_scenario
from kvsim.calibration.validate import at_host_speed, host_factor, load_observations, reference_probe_s, validate
from kvsim.scenario.parse import parse_scenario
from kvsim.sim.profile import DEFAULTS

SCENARIO = {"id": "s", "model": {"n_layers": 2, "kv_heads": 1, "head_dim": 64, "dtype": "float32"},
            "policy": {"name": "step", "step": 64}, "workload": {"prompt_tokens": 70, "prefill_chunk": 32, "decode_tokens": 4}}


def _record(repeat: int, decode_s: float, probe_s: float | None, split: str = "validation") -> dict:
    steps = parse_scenario(SCENARIO).workload.step_tokens()
    rec = {"kind": "measurement", "id": "s", "split": split, "repeat": repeat, "scenario": SCENARIO,
           "peak_bytes": 100, "final_active_bytes": 90,
           "steps": {"tokens": steps, "active_bytes": [90] * len(steps), "cache_bytes": [0] * len(steps),
                     "peak_bytes": [100] * len(steps), "wall_s": [decode_s] * len(steps)}}
    return rec if probe_s is None else {**rec, "host_probe_s": probe_s}


def _file(path: Path, *records: dict) -> Path:
    write_jsonl_atomic(path, [{"kind": "header", "format": FORMAT, "backend": "mlx-cpu", "mlx_version": "0.32.4"}, *records])
    return path


def test_probe_runs_on_real_mlx() -> None:
    assert probe_scenario("mlx-cpu").workload.decode_tokens == 32
    assert 0 < measure_probe_s("mlx-cpu") < 0.1


def test_host_scale() -> None:
    assert host_scale(1e-3, 2e-3) == 0.5
    assert host_scale(0.0, 2e-3) == host_scale(1e-3, None) == 1.0


def test_each_file_is_one_host_at_its_fast_state(tmp_path: Path) -> None:
    """A file's probe is the 10th percentile of its runs' probes; a file without probes is as measured."""
    slow = [_record(r, 2e-3, p) for r, p in enumerate([1.0e-3, 1.6e-3, 1.6e-3, 1.5e-3, 1.7e-3] * 2)]
    _file(tmp_path / "a" / "x.jsonl", *slow)  # the same file name in two folders: two hosts
    _file(tmp_path / "b" / "x.jsonl", *[_record(10 + r, 1e-3, None) for r in range(2)])
    _, (obs,) = load_observations([tmp_path / "a", tmp_path / "b"])
    assert obs.run_probes_s == (1.0e-3,) * 10 + (None, None)
    assert obs.decode_step_s == pytest.approx(1e-3)  # the fastest run, as measured
    assert at_host_speed(obs, 0.5e-3).decode_step_s == pytest.approx(1e-3)  # b's runs are not scaled
    only_a = replace(obs, run_decodes_s=obs.run_decodes_s[:10], run_probes_s=obs.run_probes_s[:10])
    assert at_host_speed(only_a, 0.5e-3).decode_step_s == pytest.approx(1e-3)  # 2 ms on a 2x slower host
    assert host_factor(only_a, 0.5e-3) == pytest.approx(2.0)
    assert at_host_speed(only_a, 0.0) is only_a and host_factor(only_a, 0.0) is None


def test_reference_probe_is_the_train_runs_median(tmp_path: Path) -> None:
    _file(tmp_path / "t.jsonl", *[_record(r, 1e-3, p, "train") for r, p in enumerate([1e-3, 2e-3, 4e-3])])
    _, observations = load_observations([tmp_path / "t.jsonl"])
    assert reference_probe_s(observations) == 1e-3  # one file: each run carries its file's fast state
    assert reference_probe_s(observations, "validation") == 0.0


def test_validate_compares_step_times_in_the_profiles_host_time(tmp_path: Path) -> None:
    _file(tmp_path / "v.jsonl", *[_record(r, 3e-3, 2e-3) for r in range(3)])
    _, observations = load_observations([tmp_path / "v.jsonl"])
    profile = DEFAULTS["mlx-cpu"]
    plain = validate(observations, profile)["rows"][0]
    scaled = validate(observations, replace(profile, host_probe_s=1e-3))["rows"][0]
    assert plain["measured_decode_s"] == pytest.approx(3e-3) and plain["host_factor"] is None
    assert scaled["measured_decode_s"] == pytest.approx(1.5e-3) and scaled["host_factor"] == pytest.approx(2.0)
    assert json.dumps(scaled)  # the row stays JSON
