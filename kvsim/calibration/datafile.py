"""Calibration data files (JSONL): one header line, then one measurement record per line.

Line 1 is ``{"kind": "header", "format": FORMAT, "backend", "mlx_version", "device", ...}``; every
later line is ``{"kind": "measurement", "id", "split", "repeat", "scenario", "steps", "peak_bytes",
"final_active_bytes", ...}`` where ``steps`` holds equal-length per-step arrays (``STEP_FIELDS``);
``host_probe_s`` (optional) is the host-speed probe measured before the run (``kvsim.calibration.host_probe``).
"""

from __future__ import annotations

import json
import lzma
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kvsim.core.errors import KvsimError
from kvsim.scenario.parse import before_layer_model

FORMAT = "kvsim-calibration/2"
FORMAT_BEFORE_LAYER_MODEL = "kvsim-calibration/1"
"""Files measured before the layer model: their scenarios are read as measured (``before_layer_model``)."""
STEP_FIELDS = ("tokens", "active_bytes", "cache_bytes", "peak_bytes", "wall_s")
_RECORD_INTS = ("repeat", "peak_bytes", "final_active_bytes")
_RECORD_NON_NEGATIVE = ("repeat", "peak_bytes")  # a run's index; a peak is never below the cache it holds


class CalibrationFileError(KvsimError):
    """A bad calibration file; ``str(err)`` is one line naming the file and line number."""

    def __init__(self, path: str | Path, line: int | None, problem: str) -> None:
        self.path, self.line, self.problem = str(path), line, problem
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")

    def __reduce__(self) -> tuple[type[CalibrationFileError], tuple[str, int | None, str]]:
        """Pickle by the constructor's arguments, so the error crosses a process pool intact."""
        return type(self), (self.path, self.line, self.problem)


def calibration_filename(backend: str, mlx_version: str, date_yyyymmdd: str) -> str:
    """``<backend>-<mlx-version>-<yyyymmdd>.jsonl``, the name ``kvsim calibrate`` writes."""
    return f"{backend}-{mlx_version}-{date_yyyymmdd}.jsonl"


def _check_header(obj: Any, path: Path) -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.get("kind") != "header":
        raise CalibrationFileError(path, 1, 'line 1 must be a header record ({"kind": "header", ...})')
    if obj.get("format") not in (FORMAT, FORMAT_BEFORE_LAYER_MODEL):
        raise CalibrationFileError(path, 1, f"format must be {FORMAT!r} or {FORMAT_BEFORE_LAYER_MODEL!r}, "
                                            f"got {obj.get('format')!r}")
    for key in ("backend", "mlx_version"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise CalibrationFileError(path, 1, f"header field {key!r} must be a non-empty string, got {obj.get(key)!r}")
    return obj


def _check_record(obj: Any, path: Path, line: int) -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.get("kind") != "measurement":
        raise CalibrationFileError(path, line, 'expected a measurement record ({"kind": "measurement", ...})')
    if not isinstance(obj.get("id"), (str, int)) or isinstance(obj.get("id"), bool):
        raise CalibrationFileError(path, line, f"field 'id' must be a string or integer, got {obj.get('id')!r}")
    for key in _RECORD_INTS:
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise CalibrationFileError(path, line, f"field {key!r} must be an integer, got {value!r}")
        if key in _RECORD_NON_NEGATIVE and value < 0:
            raise CalibrationFileError(path, line, f"field {key!r} must be >= 0, got {value!r}")
    if not isinstance(obj.get("scenario"), dict):
        raise CalibrationFileError(path, line, "field 'scenario' must be a scenario object")
    probe = obj.get("host_probe_s")
    if probe is not None and (isinstance(probe, bool) or not isinstance(probe, (int, float)) or not probe > 0):
        raise CalibrationFileError(path, line, f"field 'host_probe_s' must be a positive number of seconds, got {probe!r}")
    steps = obj.get("steps")
    if not isinstance(steps, dict):
        raise CalibrationFileError(path, line, "field 'steps' must be an object of per-step arrays")
    lengths = set()
    for key in STEP_FIELDS:
        values = steps.get(key)
        if not isinstance(values, list) or not all(isinstance(v, (int, float)) for v in values):
            raise CalibrationFileError(path, line, f"field 'steps.{key}' must be a list of numbers")
        lengths.add(len(values))
    if len(lengths) != 1 or 0 in lengths:
        raise CalibrationFileError(path, line, f"per-step arrays must be non-empty and of one length, got {sorted(lengths)}")
    return obj


def read_calibration(
    path: str | Path, *, allow_truncated_tail: bool = False, as_measured: bool = True
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read and validate one calibration file.

    Args:
        path: A ``.jsonl`` file written by ``kvsim calibrate``.
        allow_truncated_tail: Drop a last line that lacks its newline and does not parse (an
            interrupted write) instead of raising; used when resuming a run.
        as_measured: Give a format-1 file's scenarios the meaning they were measured with
            (``kvsim.scenario.parse.before_layer_model``); ``False`` returns them as stored.

    Returns:
        ``(header, records)`` in file order.

    Raises:
        CalibrationFileError: naming the file and the first bad line.
    """
    path = Path(path)
    try:  # ``.jsonl.xz``: measurement data shipped compressed (data/cpu-load)
        text = lzma.decompress(path.read_bytes()).decode() if path.suffix == ".xz" else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, lzma.LZMAError) as err:
        raise CalibrationFileError(path, None, f"cannot read: {err}") from None
    lines = text.split("\n")
    complete = text.endswith("\n")
    if complete:
        lines.pop()
    if not lines or not lines[0].strip():
        raise CalibrationFileError(path, 1, "empty file (expected a header line)")
    objs: list[Any] = []
    for number, raw in enumerate(lines, start=1):
        try:
            objs.append(json.loads(raw))
        except json.JSONDecodeError as err:
            if allow_truncated_tail and number == len(lines) > 1 and not complete:
                break
            truncated = " (truncated last line?)" if number == len(lines) and not complete else ""
            raise CalibrationFileError(path, number, f"invalid JSON at column {err.colno}: {err.msg}{truncated}") from None
    header = _check_header(objs[0], path)
    records = [_check_record(obj, path, n) for n, obj in enumerate(objs[1:], start=2)]
    if header["format"] == FORMAT_BEFORE_LAYER_MODEL and as_measured:
        for record in records:
            record["scenario"] = before_layer_model(record["scenario"])
    return header, records


def calibration_paths(sources: Iterable[str | Path]) -> list[Path]:
    """Expand directories to their ``*.jsonl`` and ``*.jsonl.xz`` files (sorted); files are kept as given."""
    paths: list[Path] = []
    for source in sources:
        source = Path(source)
        paths.extend(sorted([*source.glob("*.jsonl"), *source.glob("*.jsonl.xz")]) if source.is_dir() else [source])
    return paths


def load_calibrations(
    sources: Sequence[str | Path], *, backend: str | None = None, mlx_version: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Load several calibration files of one backend and one MLX version.

    Args:
        sources: Files or directories of ``.jsonl`` files.
        backend: Keep only files of this backend (required when the files mix backends).
        mlx_version: Keep only files of this MLX version (required when they mix versions).

    Returns:
        ``(headers, records)``; each record gains ``"source"`` (its file name) and ``"source_path"``.

    Raises:
        CalibrationFileError: a bad file, no file left after filtering, or a silent mix of
            backends or MLX versions.
    """
    paths = calibration_paths(sources)
    if not paths:
        raise CalibrationFileError(", ".join(map(str, sources)) or "<none>", None, "no calibration files found")
    loaded = [(p, *read_calibration(p)) for p in paths]
    kept = [
        (p, h, r)
        for p, h, r in loaded
        if (backend is None or h["backend"] == backend) and (mlx_version is None or h["mlx_version"] == mlx_version)
    ]
    if not kept:
        found = sorted({(h["backend"], h["mlx_version"]) for _, h, _ in loaded})
        raise CalibrationFileError(paths[0].parent, None, f"no file matches backend={backend} mlx_version={mlx_version}; found {found}")
    for key, chosen in (("backend", backend), ("mlx_version", mlx_version)):
        values = sorted({h[key] for _, h, _ in kept})
        if chosen is None and len(values) > 1:
            names = ", ".join(f"{p.name} ({h[key]})" for p, h, _ in kept)
            raise CalibrationFileError(paths[0].parent, None, f"files mix {key}s {values}: choose one with {key}= (CLI: --{key.replace('_', '-')}) ({names})")
    headers = [h for _, h, _ in kept]
    records = [{**rec, "source": p.name, "source_path": str(p)} for p, _, recs in kept for rec in recs]
    return headers, records


def write_jsonl_atomic(path: str | Path, objs: Iterable[Any]) -> None:
    """Write one JSON object per line to a temp file beside ``path``, fsync, then ``os.replace``."""
    write_lines_atomic(path, [json.dumps(obj, separators=(",", ":")) for obj in objs])


def write_lines_atomic(path: str | Path, lines: Sequence[str]) -> None:
    """Write pre-encoded JSON lines atomically (temp file in the same directory + ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
