"""Calibration JSONL files: round trip, one-line errors naming file and line, no silent mixing."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from kvsim.calibration.datafile import (
    FORMAT,
    CalibrationFileError,
    calibration_filename,
    load_calibrations,
    read_calibration,
    write_jsonl_atomic,
)


def _header(backend: str = "mlx-cpu", version: str = "0.32.4") -> dict:
    return {"kind": "header", "format": FORMAT, "backend": backend, "mlx_version": version, "device": {}}


def _record(sid: str = "s1", repeat: int = 0, n_steps: int = 3) -> dict:
    steps = {
        "tokens": [4] * n_steps,
        "active_bytes": [100 * (i + 1) for i in range(n_steps)],
        "cache_bytes": [0] * n_steps,
        "peak_bytes": [150 * (i + 1) for i in range(n_steps)],
        "wall_s": [0.001] * n_steps,
    }
    return {"kind": "measurement", "id": sid, "split": "train", "repeat": repeat, "scenario": {"id": sid},
            "steps": steps, "peak_bytes": max(steps["peak_bytes"]), "final_active_bytes": steps["active_bytes"][-1]}


def _write(path: Path, *objs: dict) -> Path:
    write_jsonl_atomic(path, objs)
    return path


def test_round_trip(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.jsonl", _header(), _record("s1"), _record("s2", 1))
    header, records = read_calibration(path)
    assert header["backend"] == "mlx-cpu"
    assert [(r["id"], r["repeat"]) for r in records] == [("s1", 0), ("s2", 1)]
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["a.jsonl"]  # no temp file left behind


def test_filename() -> None:
    assert calibration_filename("mlx-cuda", "0.32.4", "20261129") == "mlx-cuda-0.32.4-20261129.jsonl"


def test_corrupt_middle_line_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", _header(), _record("s1"), _record("s2"))
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:40] + "}}}"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CalibrationFileError) as err:
        read_calibration(path)
    assert str(err.value).startswith(f"{path}:2: invalid JSON")
    assert "\n" not in str(err.value)
    with pytest.raises(CalibrationFileError):  # a bad line that is not the tail is never forgiven
        read_calibration(path, allow_truncated_tail=True)


def test_error_crosses_a_process_pool_intact(tmp_path: Path) -> None:
    """A worker's one-line error reaches the parent as the same exception (scripts read files in pools)."""
    path = _write(tmp_path / "p.jsonl", _header(), _record("s1"), _record("s2"))
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1][:40], lines[2]]) + "\n")
    with pytest.raises(CalibrationFileError) as local:
        read_calibration(path)
    with ProcessPoolExecutor(max_workers=1) as pool, pytest.raises(CalibrationFileError) as remote:
        pool.submit(read_calibration, path).result()
    assert str(remote.value) == str(local.value) and remote.value.line == 2 and remote.value.path == str(path)


def test_truncated_tail(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", _header(), _record("s1"), _record("s2"))
    text = path.read_text()
    path.write_text(text[: len(text) - 30])  # cut inside the last record, newline gone
    with pytest.raises(CalibrationFileError, match=r"t\.jsonl:3: .*truncated last line"):
        read_calibration(path)
    _, records = read_calibration(path, allow_truncated_tail=True)
    assert [r["id"] for r in records] == ["s1"]


@pytest.mark.parametrize(
    ("mutate", "line", "needle"),
    [
        (lambda h, r: ({**h, "kind": "measurement"}, r), 1, "line 1 must be a header"),
        (lambda h, r: ({**h, "format": "other/9"}, r), 1, "format must be"),
        (lambda h, r: ({**h, "backend": ""}, r), 1, "'backend'"),
        (lambda h, r: (h, {**r, "peak_bytes": "12"}), 2, "'peak_bytes' must be an integer, got '12'"),
        (lambda h, r: (h, {**r, "repeat": True}), 2, "'repeat' must be an integer"),
        (lambda h, r: (h, {**r, "repeat": -1}), 2, "'repeat' must be >= 0, got -1"),
        (lambda h, r: (h, {**r, "peak_bytes": -5}), 2, "'peak_bytes' must be >= 0, got -5"),
        (lambda h, r: (h, {**r, "id": None}), 2, "'id' must be a string or integer"),
        (lambda h, r: (h, {**r, "kind": "header"}), 2, "expected a measurement record"),
        (lambda h, r: (h, {**r, "steps": {**r["steps"], "wall_s": [0.1]}}), 2, "of one length"),
        (lambda h, r: (h, {**r, "steps": {**r["steps"], "tokens": "x"}}), 2, "'steps.tokens'"),
        (lambda h, r: (h, {**r, "scenario": []}), 2, "'scenario'"),
        (lambda h, r: (h, {**r, "host_probe_s": 0}), 2, "'host_probe_s' must be a positive number of seconds, got 0"),
        (lambda h, r: (h, {**r, "host_probe_s": "fast"}), 2, "'host_probe_s'"),
    ],
)
def test_invalid_fields(tmp_path: Path, mutate, line: int, needle: str) -> None:
    header, record = mutate(_header(), _record())
    path = _write(tmp_path / "bad.jsonl", header, record)
    with pytest.raises(CalibrationFileError) as err:
        read_calibration(path)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert needle in str(err.value)


def test_empty_and_missing_file(tmp_path: Path) -> None:
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    with pytest.raises(CalibrationFileError, match=r"e\.jsonl:1: empty file"):
        read_calibration(empty)
    with pytest.raises(CalibrationFileError, match="cannot read"):
        read_calibration(tmp_path / "missing.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CalibrationFileError, match="cannot read"):
        read_calibration(tmp_path / "bin.jsonl")


def test_load_refuses_silent_mixing(tmp_path: Path) -> None:
    _write(tmp_path / "cpu.jsonl", _header("mlx-cpu"), _record("a"))
    _write(tmp_path / "cuda.jsonl", _header("mlx-cuda"), _record("b"), _record("b", 1))
    with pytest.raises(CalibrationFileError, match=r"files mix backends \[.mlx-cpu., .mlx-cuda.\]: choose one with backend="):
        load_calibrations([tmp_path])
    headers, records = load_calibrations([tmp_path], backend="mlx-cuda")
    assert [h["backend"] for h in headers] == ["mlx-cuda"]
    assert [(r["id"], r["repeat"], r["source"]) for r in records] == [("b", 0, "cuda.jsonl"), ("b", 1, "cuda.jsonl")]
    with pytest.raises(CalibrationFileError, match="no file matches backend=mlx-metal"):
        load_calibrations([tmp_path], backend="mlx-metal")


def test_load_refuses_mixed_versions(tmp_path: Path) -> None:
    old = _write(tmp_path / "old.jsonl", _header(version="0.31.2"), _record("a"))
    new = _write(tmp_path / "new.jsonl", _header(version="0.32.4"), _record("a"))
    with pytest.raises(CalibrationFileError, match="files mix mlx_versions"):
        load_calibrations([old, new])
    _, records = load_calibrations([old, new], mlx_version="0.31.2")
    assert [r["source"] for r in records] == ["old.jsonl"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationFileError, match="no calibration files found"):
        load_calibrations([tmp_path / "empty"])
