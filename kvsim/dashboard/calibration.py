"""Predicted vs measured peaks over the calibration files (pure; the simulator is passed in)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kvsim.calibration.datafile import CalibrationFileError, calibration_paths, read_calibration
from kvsim.core.paths import CALIBRATION_DIR
from kvsim.dashboard.sweeps import Simulate
from kvsim.scenario.parse import parse_scenario
from policies.parse import PolicyError


def calibration_dir() -> Path:
    """``data/calibration``, or ``$KVSIM_CALIBRATION_DIR`` when set (tests, other checkouts)."""
    return Path(os.environ.get("KVSIM_CALIBRATION_DIR") or CALIBRATION_DIR)
MIB = float(1 << 20)


def compare(sources: Iterable[str | Path], simulate: Simulate) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per measurement with the prediction and its error, and one line per problem.

    A bad file or an invalid scenario is reported and skipped; the rest are compared.
    """
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for path in calibration_paths(sources):
        try:
            header, records = read_calibration(path)
        except CalibrationFileError as err:
            problems.append(str(err))
            continue
        for rec in records:
            try:
                result = simulate(parse_scenario(rec["scenario"], backend=header["backend"]), None)
            except PolicyError as err:
                problems.append(f"{path.name} id {rec['id']!r}: {err}")
                continue
            measured, predicted = rec["peak_bytes"], result.summary.peak_bytes
            rows.append(
                {
                    "file": path.name,
                    "id": str(rec["id"]),
                    "split": rec.get("split", ""),
                    "repeat": rec["repeat"],
                    "backend": header["backend"],
                    "mlx_version": header["mlx_version"],
                    "policy": result.policy,
                    "measured MiB": measured / MIB,
                    "predicted MiB": predicted / MIB,
                    "error MiB": (predicted - measured) / MIB,
                    "error %": 100.0 * (predicted - measured) / measured if measured else float("nan"),
                    "final measured MiB": rec["final_active_bytes"] / MIB,
                    "final predicted MiB": result.summary.final_active_bytes / MIB,
                }
            )
    return rows, problems
