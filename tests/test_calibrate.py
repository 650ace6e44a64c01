"""`kvsim calibrate`: sweep coverage, resumable writing, CLI errors, real MLX CPU runs."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from kvsim.calibration.calibrate import SkipWarning, cache_factory_for, calibrate
from kvsim.calibration.datafile import read_calibration
from kvsim.calibration.sweep import SWEEPS, build_sweep
from kvsim.cli.calibrate import standalone_main
from kvsim.scenario.parse import parse_scenario
from policies.growth import StepPolicy

pytest.importorskip("mlx.core")

REQUIRED_POLICIES = {"step", "prealloc", "geometric", "quantized", "lowpeak"}
DATE = "20260101"


@pytest.fixture(scope="module")
def sweep():
    return build_sweep("default")


def test_sweep_covers_every_policy_in_both_splits(sweep) -> None:
    by_split = {s: {it.scenario.policy_name for it in sweep if it.split == s} for s in ("train", "validation")}
    assert REQUIRED_POLICIES <= by_split["train"]
    assert REQUIRED_POLICIES <= by_split["validation"]
    assert by_split["train"] == by_split["validation"]
    share = sum(it.split == "validation" for it in sweep) / len(sweep)
    assert 0.3 <= share <= 0.45


def test_sweep_covers_shapes_consumers_and_workloads(sweep) -> None:
    scs = [it.scenario for it in sweep]
    layers = [lay for sc in scs for lay in sc.model.layers]
    assert {sc.consumer for sc in scs} == {"last_row", "sdpa"}
    assert {4, 12, 32} <= {sc.model.n_layers for sc in scs}
    assert {1, 2, 8} <= {lay.kv_heads for lay in layers}
    assert {64, 128, 512} <= {lay.head_dim for lay in layers}
    assert {"float16", "bfloat16", "float32"} <= {lay.dtype for lay in layers}
    assert {256, 512, 1024} <= {sc.policy_dict().get("step", 256) for sc in scs if sc.policy_name == "step"}
    assert any(sc.workload.batch > 1 for sc in scs)
    mixed = [sc for sc in scs if {lay.ratio for lay in sc.model.layers} >= {1, 4, 128}]
    assert {sc.policy_name for sc in mixed} >= REQUIRED_POLICIES
    step_rows = {sc.id: sc.policy_dict().get("step", 256) for sc in scs if sc.policy_name == "step"}
    chunks = {sid: sc.workload.prefill_chunk for sc in scs for sid in [sc.id] if sid in step_rows}
    assert any(chunks[s] % step_rows[s] == 0 for s in chunks)  # aligned with the step
    assert any(chunks[s] % step_rows[s] and step_rows[s] % chunks[s] for s in chunks)  # not aligned
    assert any(sc.workload.prompt_tokens % sc.workload.prefill_chunk for sc in scs)  # short last chunk


def test_sweep_is_small_and_stable(sweep) -> None:
    ids = [str(it.scenario.id) for it in sweep]
    assert len(ids) == len(set(ids))
    assert [(str(it.scenario.id), it.split) for it in build_sweep("default")] == [(i, it.split) for i, it in zip(ids, sweep)]
    for it in sweep:  # the 2-core CPU budget: KV at most 1 GiB, prompts <= ~4K, decode <= ~600
        sc = it.scenario
        assert sc.model.kv_bytes_per_token(sc.workload.batch) * sc.workload.total_tokens < 1 << 30, sc.id
        assert sc.workload.prompt_tokens <= 4096 and sc.workload.decode_tokens <= 600, sc.id
        assert it.scenario.to_dict()["backend"] == "mlx-cpu"
        assert parse_scenario(sc.to_dict()).to_dict() == sc.to_dict()


def test_unknown_sweep() -> None:
    with pytest.raises(ValueError, match="--sweep: unknown sweep, got 'nope'"):
        build_sweep("nope")


def test_scenario_without_cache_is_skipped_with_warning() -> None:
    sc = parse_scenario({"id": "p", "model": {"n_layers": 1, "kv_heads": 1, "head_dim": 64},
                         "policy": {"name": "paged"}, "workload": {"prompt_tokens": 8, "prefill_chunk": 8}})
    with pytest.warns(SkipWarning, match="skipping p: no MLX cache for policy 'paged'"):
        assert cache_factory_for(sc) is None


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_tiny_run_records_and_resume(tmp_path: Path) -> None:
    run = calibrate(tmp_path, sweep="tiny", repeats=1, date=DATE, progress=False)
    assert run.path == tmp_path / f"mlx-cpu-{run.path.name.split('-')[2]}-{DATE}.jsonl"
    assert (run.measured_runs, run.finished_before, run.skipped_ids) == (2, 0, ())
    header, records = read_calibration(run.path)
    assert header["backend"] == "mlx-cpu" and header["mlx_version"] == run.path.name.split("-")[2]
    assert header["device"]["mlx_version"] == header["mlx_version"]
    items = {str(it.scenario.id): it for it in build_sweep("tiny")}
    for rec in records:
        sc = items[rec["id"]].scenario
        steps = rec["steps"]
        assert rec["split"] == items[rec["id"]].split
        assert rec["scenario"] == sc.to_dict() == parse_scenario(rec["scenario"]).to_dict()
        assert sum(steps["tokens"]) == sc.workload.total_tokens
        assert steps["tokens"] == sc.workload.step_tokens()
        assert rec["peak_bytes"] == max(steps["peak_bytes"])
        assert rec["final_active_bytes"] == steps["active_bytes"][-1]
        assert all(p >= a for p, a in zip(steps["peak_bytes"], steps["active_bytes"]))
        assert 0 < rec["host_probe_s"] < 1  # the host-speed probe measured before the run
    step64 = next(r for r in records if r["id"] == "tiny-step64")
    sc = items["tiny-step64"].scenario
    rows = held = 0
    for n in sc.workload.step_tokens():  # mlx-lm KVCache capacity after the run (policies.growth)
        growth = StepPolicy(64).grow(rows, held, n)
        rows, held = (growth.capacity_rows if growth else rows), held + n
    kv_bytes = 2 * sum(lay.row_bytes * rows for lay in sc.model.layers)
    assert rows % 64 and kv_bytes <= step64["final_active_bytes"] < kv_bytes + 64  # unaligned: not a step multiple

    # an interrupted write: the last record loses its tail; a re-run measures it again
    text = run.path.read_text()
    run.path.write_text(text[: len(text) - 25])
    again = calibrate(tmp_path, sweep="tiny", repeats=1, date=DATE, progress=False)
    assert (again.measured_runs, again.finished_before) == (1, 1)
    header2, records2 = read_calibration(run.path)
    assert header2 == header
    assert [r["id"] for r in records2] == [r["id"] for r in records]
    assert records2[1]["final_active_bytes"] == records[1]["final_active_bytes"]
    # the re-measured run is the same scenario; its peak may differ (small sdpa steps race the CPU worker)
    assert records2[1]["scenario"] == records[1]["scenario"]
    assert records2[1]["peak_bytes"] >= records2[1]["final_active_bytes"]

    # a finished file: nothing to do; more repeats add only the new ones
    assert calibrate(tmp_path, sweep="tiny", repeats=1, date=DATE, progress=False).measured_runs == 0
    more = calibrate(tmp_path, sweep="tiny", repeats=2, limit=1, date=DATE, progress=False)
    assert (more.measured_runs, more.finished_before) == (1, 1)
    assert [(r["id"], r["repeat"]) for r in _lines(run.path)[1:]][-1] == ("tiny-step64", 1)
    assert [p.name for p in tmp_path.iterdir()] == [run.path.name]


def test_cli_runs_and_reports_errors_on_one_line(tmp_path: Path, capsys) -> None:
    assert standalone_main(["calibrate", "--out", str(tmp_path), "--sweep", "tiny", "--match", "sdpa",
                            "--date", DATE, "--no-progress"]) == 0
    (path,) = tmp_path.iterdir()
    assert [r["id"] for r in _lines(path)[1:]] == ["tiny-step32-sdpa"]
    assert "1 runs measured" in capsys.readouterr().err

    path.write_text(path.read_text().replace('"kind":"measurement"', '"kind":"measurement",,', 1) + "{}\n")
    assert standalone_main(["calibrate", "--out", str(tmp_path), "--sweep", "tiny", "--date", DATE]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}:2: invalid JSON" in err and "Traceback" not in err

    assert standalone_main(["calibrate", "--out", str(tmp_path), "--date", "2026-01-01"]) == 2
    assert capsys.readouterr().err == "kvsim calibrate: --date: must be yyyymmdd, got '2026-01-01'\n"
    with pytest.raises(SystemExit):
        standalone_main(["calibrate", "--repeats", "0"])
    assert "--repeats: must be >= 1, got 0" in capsys.readouterr().err
    assert standalone_main(["calibrate", "--out", str(path), "--sweep", "tiny", "--date", DATE]) == 2  # a file
    assert capsys.readouterr().err == f"kvsim calibrate: --out: must be a directory, got the file {str(path)!r}\n"


def test_cli_list(capsys) -> None:
    assert standalone_main(["calibrate", "--list", "--sweep", "default"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == len(SWEEPS["default"]())
    assert {r.split("\t")[1] for r in rows} == {"train", "validation"}


@pytest.mark.benchmark
def test_default_sweep_runs_on_cpu(tmp_path: Path) -> None:
    """The whole default sweep on the CPU backend (about a minute on 2 cores)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", SkipWarning)
        run = calibrate(tmp_path, date=DATE, progress=False)
    _, records = read_calibration(run.path)
    assert len(records) == len(build_sweep("default"))


RANDOM_SWEEPS = {**{f"holdout{n}": "validation" for n in ("", *range(2, 18))}, "train2": "train", "train3": "train",
                 "train4": "train"}


@pytest.mark.parametrize("name", sorted(RANDOM_SWEEPS))
def test_random_sweeps_are_stable_disjoint_and_in_one_split(name: str) -> None:
    items = build_sweep(name)
    assert len(items) == 36 and {it.split for it in items} == {RANDOM_SWEEPS[name]}
    assert [it.scenario.to_dict() for it in items] == [it.scenario.to_dict() for it in build_sweep(name)]
    assert len({str(it.scenario.id) for it in items}) == 36
    assert {it.scenario.policy_name for it in items} >= {"step", "prealloc", "full", "rotating", "quantized", "lowpeak"}
    others = [it.scenario for other in ("default", *RANDOM_SWEEPS) if other != name for it in build_sweep(other)]
    assert not {str(sc.id) for sc in others} & {str(it.scenario.id) for it in items}
    drawn = {json.dumps({k: v for k, v in it.scenario.to_dict().items() if k != "id"}, sort_keys=True) for it in items}
    assert not drawn & {json.dumps({k: v for k, v in sc.to_dict().items() if k != "id"}, sort_keys=True) for sc in others}


@pytest.mark.parametrize("name", ["holdout", "holdout2", "holdout3", "holdout4"])
def test_shipped_held_out_runs_are_the_sweep(name: str) -> None:
    """A re-run resumes the shipped file only if the sweep still draws the same scenarios."""
    path = Path(__file__).resolve().parent.parent / "data" / name / "mlx-cuda-0.32.4-20261129.jsonl"
    _, records = read_calibration(path)
    stored = {r["id"]: r["scenario"] for r in records}
    assert stored == {str(it.scenario.id): it.scenario.to_dict() for it in build_sweep(name, "mlx-cuda")}
