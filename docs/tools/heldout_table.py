"""Held-out sweeps under one or more profiles, side by side: the tables of ``docs/validation.md`` in one command.

For each data directory (by default the calibration sweep's validation split and every ``data/holdout*``
directory with files of the backend) and each profile (the shipped one first, then every ``--profile``), one row
of what ``kvsim validate`` summarises: peak median / max |error|, final active max, decode median, runs in range
and the widest range. Then, per profile, the held-out totals: runs in range and sweeps whose point max is over
the 12% target. Directories are read in parallel, one process per core.

Usage: ``python docs/tools/heldout_table.py [--backend mlx-cuda] [--profile FILE ...] [--data DIR ...]``
(about 20 s per profile for the CUDA data on 2 cores).
"""

from __future__ import annotations

import argparse
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from kvsim.calibration.datafile import CalibrationFileError, calibration_paths
from kvsim.calibration.validate import GPU_POINT_MAX_PCT, load_observations, validate
from kvsim.scenario.parse import ScenarioError
from kvsim.sim.profile import load_profile, profile_from_file

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
SHIPPED = "shipped"


def default_dirs(backend: str) -> list[Path]:
    """``data/calibration`` then ``data/holdout``, ``holdout2``, ... in numeric order, where they hold ``backend``."""
    def number(path: Path) -> int:
        digits = re.sub(r"\D", "", path.name)
        return int(digits) if digits else 1

    holdouts = sorted((p for p in DATA_DIR.glob("holdout*") if p.is_dir()), key=number)
    return [d for d in [DATA_DIR / "calibration", *holdouts]
            if any(p.name.startswith(f"{backend}-") for p in calibration_paths([d]))]


def summary(data_dir: Path, backend: str, profile_path: str) -> dict[str, Any]:
    """``kvsim validate``'s summary of one directory's validation split under one profile."""
    _, observations = load_observations([data_dir], backend=backend)
    profile = load_profile(backend) if profile_path == SHIPPED else profile_from_file(profile_path, backend)
    report = validate(observations, profile, "validation")
    if not report["rows"]:
        raise ValueError(f"--data: {data_dir} has no validation-split records")
    return report["summary"]


def row(data_dir: Path, label: str, s: dict[str, Any]) -> str:
    peak, final, decode = s["peak_abs_err_pct"], s["final_abs_err_pct"], s["decode_abs_err_pct"]
    cells = [f"`{data_dir.name}`", label, str(s["scenarios"]), f"{peak['median']:.2f}% / {peak['max']:.2f}%",
             f"{final['max']:.3f}%", "-" if decode["median"] is None else f"{decode['median']:.1f}%"]
    if "runs" in s:
        cells += [f"{s['runs_in_range']} / {s['runs']}", f"{s['max_range_width']:.2f}x"]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="mlx-cuda")
    parser.add_argument("--profile", nargs="*", default=[], metavar="FILE", help="profile JSONs to set beside the shipped one")
    parser.add_argument("--data", nargs="*", type=Path, metavar="DIR", help="data directories (default: see above)")
    args = parser.parse_args()
    dirs = args.data or default_dirs(args.backend)
    if not dirs:
        sys.exit(f"--data: no directory holds {args.backend} files")
    profiles = [SHIPPED, *args.profile]
    jobs = [(d, p) for d in dirs for p in profiles]
    try:
        with ProcessPoolExecutor() as pool:
            results = list(pool.map(summary, [d for d, _ in jobs], [args.backend] * len(jobs), [p for _, p in jobs]))
    except (CalibrationFileError, ScenarioError, ValueError) as err:  # one line each; they cross the pool intact
        sys.exit(f"heldout_table: {err}")
    gpu = "runs" in results[0]
    head = ["data", "profile", "scenarios", "peak median / max", "final max", "decode median"]
    head += ["runs in range", "widest"] if gpu else []
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    totals = {p: [0, 0, 0, 0] for p in profiles}  # runs in range, runs, sweeps over the max target, sweeps
    for (d, p), s in zip(jobs, results):
        print(row(d, p, s))
        if d.name.startswith("holdout") and gpu:
            t = totals[p]
            t[0] += s["runs_in_range"]
            t[1] += s["runs"]
            t[2] += s["peak_abs_err_pct"]["max"] > GPU_POINT_MAX_PCT
            t[3] += 1
    if gpu:
        print()
        for p, (inside, runs, over, sweeps) in totals.items():
            print(f"{p}: held out, {inside} / {runs} runs in range; point max over {GPU_POINT_MAX_PCT:g}% "
                  f"on {over} of {sweeps} sweeps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
