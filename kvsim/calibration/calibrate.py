"""`kvsim calibrate`: run the reference workload over a built-in sweep and record MLX's counters.

Each finished (scenario, repeat) is appended to ``<out>/<backend>-<mlx-version>-<yyyymmdd>.jsonl``
by rewriting the file atomically, so an interrupted run loses nothing and a re-run skips what is done.
"""

from __future__ import annotations

import datetime as dt
import gc
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim.calibration.datafile import FORMAT, calibration_filename, read_calibration, write_lines_atomic
from kvsim.calibration.sweep import SweepItem, build_sweep
from kvsim.core.paths import CALIBRATION_DIR, REPO_DIR
from kvsim.scenario.parse import Scenario

DEFAULT_OUT = CALIBRATION_DIR


class SkipWarning(UserWarning):
    """A scenario was skipped because its cache class cannot be built here."""


@dataclass(frozen=True, slots=True)
class CalibrationRun:
    """What one ``calibrate`` call did: the file, runs measured now, runs already there, ids skipped."""

    path: Path
    measured_runs: int
    finished_before: int
    skipped_ids: tuple[str, ...]


def cache_factory_for(scenario: Scenario) -> Callable[[Scenario, int], Any] | None:
    """``kvsim.calibration.measure.reference_cache`` if it can build this scenario's cache, else ``None`` (warned)."""
    from kvsim.calibration.measure import reference_cache

    try:
        reference_cache(scenario, 0)
    except (ImportError, NotImplementedError, ValueError, KeyError, TypeError) as err:
        problem = f"{type(err).__name__}: {err}".splitlines()[0]
        warnings.warn(f"skipping {scenario.id}: no MLX cache for policy {scenario.policy_name!r} ({problem})", SkipWarning, stacklevel=2)
        return None
    return reference_cache


def measurement_record(item: SweepItem, repeat: int, measurement: Any, host_probe_s: float | None = None) -> dict[str, Any]:
    """One JSONL record for a finished run of the reference workload (``host_probe_s``: the probe
    measured just before it, ``kvsim.calibration.host_probe``)."""
    steps = measurement.steps
    record = {
        "kind": "measurement",
        "id": item.scenario.id,
        "split": item.split,
        "repeat": repeat,
        "scenario": item.scenario.to_dict(),
        "backend": measurement.backend,
        "mlx_version": measurement.mlx_version,
        "cache_impl": measurement.cache_impl,
        "peak_bytes": measurement.peak_bytes,
        "final_active_bytes": measurement.final_active_bytes,
        "wall_s": round(sum(s.wall_s for s in steps), 6),
        "steps": {
            "tokens": [s.tokens for s in steps],
            "active_bytes": [s.active_bytes for s in steps],
            "cache_bytes": [s.cache_bytes for s in steps],
            "peak_bytes": [s.peak_bytes for s in steps],
            "wall_s": [round(s.wall_s, 7) for s in steps],
        },
    }
    if host_probe_s is not None:
        record["host_probe_s"] = round(host_probe_s, 7)
    return record


def kvsim_version() -> str:
    """The installed kvsim version, else the one in pyproject.toml."""
    from importlib import metadata

    try:
        return metadata.version("kvsim")
    except metadata.PackageNotFoundError:
        import tomllib

        pyproject = REPO_DIR / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def _progress(total: int, enabled: bool) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, file=sys.stderr, unit="run", disable=not enabled, dynamic_ncols=True)


def calibrate(
    out_dir: str | Path = DEFAULT_OUT,
    *,
    sweep: str = "default",
    repeats: int | None = None,
    limit: int | None = None,
    match: str | None = None,
    date: str | None = None,
    progress: bool = True,
) -> CalibrationRun:
    """Measure the sweep on the current MLX device and append records to the day's file.

    Every run is preceded by the host-speed probe (``kvsim.calibration.host_probe``), recorded with it.

    Args:
        out_dir: Directory for ``<backend>-<mlx-version>-<yyyymmdd>.jsonl``.
        sweep: A name in ``SWEEPS``.
        repeats: Runs per scenario; default 1 on the CPU backend, 3 on GPU backends.
        limit: Measure only the first ``limit`` scenarios (after ``match``).
        match: Keep only scenarios whose id contains this text.
        date: ``yyyymmdd`` for the file name (default: today, UTC).
        progress: Show a tqdm bar on stderr.

    Returns:
        A ``CalibrationRun`` summary.
    """
    import mlx.core as mx

    from kvsim.calibration.host_probe import measure_probe_s
    from kvsim.calibration.measure import device_info, run_reference

    info = device_info()
    backend, version = info["backend"], info["mlx_version"]
    repeats = repeats if repeats is not None else (1 if backend == "mlx-cpu" else 3)
    if repeats < 1:
        raise ValueError(f"--repeats: must be >= 1, got {repeats}")
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ValueError(f"--out: must be a directory, got the file {str(out_dir)!r}")
    items = [it for it in build_sweep(sweep, backend) if match is None or match in str(it.scenario.id)]
    items = items[:limit] if limit is not None else items
    date = date or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d")
    path = Path(out_dir) / calibration_filename(backend, version, date)
    lines, done = _resume(path, backend, version)
    if not lines:
        header = {"kind": "header", "format": FORMAT, "backend": backend, "mlx_version": version,
                  "mlx_lm_version": info.get("mlx_lm_version"), "kvsim_version": kvsim_version(),
                  "default_device": str(mx.default_device()), "device": info,
                  "host_memory_bytes": _host_memory_bytes(), "sweep": sweep,
                  "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
        lines.append(_encode(header))
        write_lines_atomic(path, lines)
    todo = [(it, r) for r in range(repeats) for it in items if (str(it.scenario.id), r) not in done]  # repeat-major
    bar, ran = _progress(len(todo), progress), 0
    factories: dict[str, Any] = {}
    for item, repeat in todo:
        sid = str(item.scenario.id)
        if sid not in factories:
            factories[sid] = cache_factory_for(item.scenario)
        factory = factories[sid]
        if factory is not None:
            if bar is not None:
                bar.set_postfix_str(str(item.scenario.id)[:40])
            probe_s = measure_probe_s(backend)
            measurement = run_reference(item.scenario, factory)
            lines.append(_encode(measurement_record(item, repeat, measurement, probe_s)))
            write_lines_atomic(path, lines)
            ran += 1
            del measurement
            gc.collect()
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    skipped = tuple(sid for sid, f in factories.items() if f is None)
    return CalibrationRun(path, ran, len(items) * repeats - len(todo), skipped)


def _host_memory_bytes() -> int | None:
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _encode(obj: Any) -> str:
    import json

    return json.dumps(obj, separators=(",", ":"))


def _resume(path: Path, backend: str, version: str) -> tuple[list[str], set[tuple[str, int]]]:
    """Lines already in ``path`` (a truncated last line dropped) and its finished (id, repeat) pairs."""
    if not path.exists():
        return [], set()
    header, records = read_calibration(path, allow_truncated_tail=True, as_measured=False)
    if header["format"] != FORMAT:
        raise ValueError(f"{path}: holds format {header['format']!r}; measure into another folder (--out)")
    if (header["backend"], header["mlx_version"]) != (backend, version):
        raise ValueError(f"{path}: holds {header['backend']} MLX {header['mlx_version']}, not {backend} MLX {version}")
    lines = [_encode(header)] + [_encode(r) for r in records]
    return lines, {(str(r["id"]), r["repeat"]) for r in records}
