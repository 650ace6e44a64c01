"""`kvsim fit` / `kvsim validate` on real MLX measurements of the tiny sweep; error paths."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvsim.calibration.calibrate import calibrate
from kvsim.calibration.datafile import read_calibration, write_jsonl_atomic
from kvsim.calibration.fit import (
    BANDWIDTH_GRID_BYTES_PER_S,
    LAG_GRID_S,
    MALLOC_GRID_BYTES_PER_S,
    NODES_GRID,
    fit_lag,
    point_peaks,
)
from kvsim.calibration.validate import Observation, load_observations, validate
from kvsim.cli.commands import main
from kvsim.scenario.parse import parse_scenario
from kvsim.sim.profile import DEFAULTS, BackendProfile, profile_from_file

mx = pytest.importorskip("mlx.core")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real MLX CPU runs of the tiny sweep (one train, one validation scenario)."""
    out = tmp_path_factory.mktemp("calibration")
    run = calibrate(out, sweep="tiny", repeats=1, date="20260101", progress=False)
    assert run.measured_runs == 2
    return run.path


@pytest.fixture(scope="module")
def fitted(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("profiles")
    assert main(["fit", "--data", str(data), "--out", str(out), "--max-evals", "12", "--quiet"]) == 0
    return out / "mlx-cpu.json"


def _rewrite(src: Path, dst: Path, **header: str) -> Path:
    head, records = read_calibration(src)
    write_jsonl_atomic(dst, [{**head, **header}, *records])
    return dst


def _one_line_error(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    for word in words:
        assert word in err
    return err


def test_fit_writes_profile_with_provenance(data: Path, fitted: Path) -> None:
    doc = json.loads(fitted.read_text())
    fit, profile = doc["fit"], doc["profile"]
    assert profile["name"] == "mlx-cpu" and profile["status"] == "fitted"
    assert profile["mlx_version"] == fit["mlx_version"] == mx.__version__
    assert [f["path"] for f in fit["data_files"]] == [str(data)]
    assert len(fit["data_files"][0]["sha256"]) == 64
    assert [r["id"] for r in fit["train_residuals"]] == ["tiny-step64"]
    assert all(fit["fitted"][k] > 0 for k in ("host_node_s", "host_kernel_s", "device_dispatch_s", "device_bytes_per_s"))
    # one train scenario: the time scale makes its decode step exact
    assert abs(fit["train_residuals"][0]["decode_err_pct"]) < 1e-6


def test_fit_is_no_worse_than_defaults_on_train(data: Path, fitted: Path) -> None:
    _, observations = load_observations([data])
    before = validate(observations, DEFAULTS["mlx-cpu"], "train")["summary"]
    after = validate(observations, profile_from_file(fitted, "mlx-cpu"), "train")["summary"]
    assert after["peak_abs_err_pct"]["max"] <= before["peak_abs_err_pct"]["max"] + 1e-9
    assert after["decode_abs_err_pct"]["median"] <= before["decode_abs_err_pct"]["median"]


def test_validate_json_matches_measurements(data: Path, fitted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--data", str(data), "--profile", str(fitted), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    _, records = read_calibration(data)
    measured = {r["id"]: r for r in records if r["split"] == "validation"}
    assert [row["id"] for row in report["rows"]] == list(measured)
    for row in report["rows"]:
        rec = measured[row["id"]]
        assert row["measured_peak_bytes"] == rec["peak_bytes"]
        assert row["peak_err_pct"] == pytest.approx((row["predicted_peak_bytes"] - rec["peak_bytes"]) / rec["peak_bytes"] * 100)
    assert report["summary"]["scenarios"] == 1 and report["data_mlx_version"] == mx.__version__


def test_validate_table_lists_scenarios_and_targets(data: Path, fitted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--data", str(data), "--profile", str(fitted), "--split", "all"]) == 0
    out = capsys.readouterr().out
    assert "tiny-step64" in out and "tiny-step32-sdpa" in out
    assert "peak median |err| <= 1.0%" in out and "decode-step median" in out


def test_mixed_backends_are_refused(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = _rewrite(data, tmp_path / "mlx-cuda.jsonl", backend="mlx-cuda")
    assert main(["fit", "--data", str(data), str(other), "--out", str(tmp_path), "--quiet"]) == 2
    _one_line_error(capsys, "kvsim fit:", "backend")
    assert not (tmp_path / "mlx-cpu.json").exists()


def test_mixed_mlx_versions_are_refused(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = _rewrite(data, tmp_path / "old.jsonl", mlx_version="0.1.0")
    assert main(["validate", "--data", str(data), str(other)]) == 2
    _one_line_error(capsys, "kvsim validate:", "mlx_version", "0.1.0")


def test_other_mlx_version_than_the_profile_is_said(data: Path, fitted: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    newer = _rewrite(data, tmp_path / "newer.jsonl", mlx_version="0.99.0")
    assert main(["validate", "--data", str(newer), "--profile", str(fitted)]) == 0
    out = capsys.readouterr()
    assert "data MLX 0.99.0" in out.out
    assert out.err == (f"kvsim validate: warning: the data is MLX 0.99.0, the profile was fitted on MLX {mx.__version__}; "
                       "allocators change between releases: refit with kvsim fit\n")


def test_corrupt_file_is_one_line_error(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(data.read_text() + '{"kind": "measurement", "id":\n')
    assert main(["fit", "--data", str(bad), "--out", str(tmp_path), "--quiet"]) == 2
    _one_line_error(capsys, f"{bad}:4", "invalid JSON")


def test_invalid_scenario_in_data_is_one_line_error(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head, records = read_calibration(data)
    records[0]["scenario"]["workload"]["prefill_chunk"] = 0
    bad = tmp_path / "bad-scenario.jsonl"
    write_jsonl_atomic(bad, [head, *records])
    assert main(["validate", "--data", str(bad)]) == 2
    _one_line_error(capsys, "kvsim validate:", bad.name, repr(records[0]["id"]), "workload.prefill_chunk", "got 0")


@pytest.mark.parametrize(("field", "value", "kind"), [("host_node_s", "fast", "a finite number"),
                                                    ("commit_ops", 100.5, "an integer"),
                                                    ("range_low_share", True, "a finite number"),
                                                    ("rounding", 4, "a string")])
def test_profile_field_of_wrong_type_is_one_line_error(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       field: str, value: object, kind: str) -> None:
    bad = tmp_path / "typed.json"
    bad.write_text(json.dumps({"profile": {**DEFAULTS["mlx-cpu"].to_json(), field: value}}))
    assert main(["validate", "--data", str(data), "--profile", str(bad)]) == 2
    _one_line_error(capsys, "kvsim validate:", str(bad), repr(field), kind, repr(value))


def test_missing_split_and_wrong_profile(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head, records = read_calibration(data)
    train_only = tmp_path / "train.jsonl"
    write_jsonl_atomic(train_only, [head, *(r for r in records if r["split"] == "train")])
    assert main(["validate", "--data", str(train_only)]) == 2
    _one_line_error(capsys, "--split", "validation")
    cuda = tmp_path / "cuda.json"
    cuda.write_text(json.dumps({"profile": DEFAULTS["mlx-cuda"].to_json()}))
    assert main(["validate", "--data", str(data), "--profile", str(cuda)]) == 2
    _one_line_error(capsys, "mlx-cuda", "mlx-cpu")


def test_gpu_range_covers_spread_runs() -> None:
    """Runs simulated with early and late frees: the fitted range must hold both."""
    from kvsim.sim.engine import simulate_timeline
    from kvsim.sim.peak_range import estimate_peak

    cuda = DEFAULTS["mlx-cuda"]
    obj = {"id": "lag", "model": {"n_layers": 12, "kv_heads": 8, "head_dim": 128, "dtype": "float16"},
           "consumer": "last_row", "policy": {"name": "step"},
           "workload": {"prompt_tokens": 1200, "prefill_chunk": 512, "decode_tokens": 60}}
    probe = Observation(parse_scenario(obj, "mlx-cuda"), "train", (1,), (1,), None, ())

    def peak_at(profile: BackendProfile, malloc_bytes_per_s: float, lag_s: float) -> int:
        return point_peaks([probe], replace(profile, host_malloc_bytes_per_s=malloc_bytes_per_s, completion_lag_s=lag_s))[0]

    fast, slow = peak_at(cuda, 5e9, 0.0), peak_at(cuda, 0.0, 1e-3)  # slow system allocations, no lag: earlier frees
    assert fast < slow  # when frees land matters for this scenario
    obs = replace(probe, peaks_bytes=(fast, slow, slow), finals_bytes=(0, 0, 0))
    profile, sweeps = fit_lag([obs], cuda, lambda _: None)
    peak = estimate_peak(probe.scenario, profile, simulate_timeline(probe.scenario, profile, False))
    assert peak.low_bytes <= fast and slow <= peak.high_bytes
    assert peak.low_bytes <= peak.peak_bytes <= peak.high_bytes
    assert peak.high_bytes / peak.low_bytes <= profile.range_max_width
    assert sweeps == len(BANDWIDTH_GRID_BYTES_PER_S) * len(LAG_GRID_S) * len(NODES_GRID) * len(MALLOC_GRID_BYTES_PER_S)


def test_floor_margin_takes_the_tightest_margin_that_holds_the_runs() -> None:
    """Two runs on the structural floor and one lifted 30% by a late handler: the centred range misses
    the late one; the fitted floor margin moves the range up to hold all three, and is the smallest
    margin that keeps the floor runs 2% inside."""
    from kvsim.calibration.fit import fit_floor_margin
    from kvsim.sim.engine import simulate_timeline
    from kvsim.sim.peak_range import estimate_peak, peak_of
    from kvsim.sim.profile import load_profile

    obj = {"id": "floor", "model": {"n_layers": 4, "kv_heads": 2, "head_dim": 128, "dtype": "float16"},
           "policy": {"name": "step"}, "workload": {"prompt_tokens": 520, "prefill_chunk": 200, "decode_tokens": 60},
           "consumer": "sdpa"}
    sc = parse_scenario(obj, "mlx-cuda")
    profile = replace(load_profile("mlx-cuda"), range_floor_margin=1.0)
    floor = peak_of(simulate_timeline(sc, profile.floor_variant(), False))
    runs = (floor, floor, round(floor * 1.3))
    obs = Observation(sc, "train", runs, (0, 0, 0), None, ())
    centred = estimate_peak(sc, profile, simulate_timeline(sc, profile, False))
    assert centred.high_bytes < runs[2]
    fitted, sims = fit_floor_margin([obs], profile, lambda _: None)
    assert fitted.range_floor_margin == 0.02 and sims == 4
    peak = estimate_peak(sc, fitted, simulate_timeline(sc, fitted, False))
    assert all(peak.low_bytes <= r <= peak.high_bytes for r in runs)


def test_fit_load_only_moves_only_the_load_fields(data: Path, fitted: Path, tmp_path: Path) -> None:
    """``kvsim fit --load-only``: the CPU load range fitted on the train split; every other field kept."""
    (tmp_path / "mlx-cpu.json").write_text(fitted.read_text())
    assert main(["fit", "--data", str(data), "--out", str(tmp_path), "--load-only", "--quiet"]) == 0
    before, after = json.loads(fitted.read_text()), json.loads((tmp_path / "mlx-cpu.json").read_text())
    moved = {k for k in before["profile"] if before["profile"][k] != after["profile"][k]}
    assert moved <= {"load_transient_share", "load_high_margin"}
    assert 0.0 <= after["profile"]["load_transient_share"] <= 1.0
    load = after["fit"]["load"]
    assert [f["path"] for f in load["data_files"]] == [str(data)]
    assert load["train_runs"] == load["train_runs_in_range"] == 1
    assert after["fit"]["fitted"]["load_high_margin"] == after["profile"]["load_high_margin"]
