"""argparse wiring for ``kvsim calibrate`` (registered by ``kvsim.cli.commands`` via ``add_calibrate_parser``)."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from kvsim.calibration.calibrate import DEFAULT_OUT
from kvsim.calibration.sweep import SWEEPS


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1, with a one-line message otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_calibrate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``calibrate`` subcommand on an ``add_subparsers()`` object.

    The parser's default ``func`` is ``run_calibrate(args) -> int`` (the exit status).
    """
    parser = subparsers.add_parser(
        "calibrate",
        help="measure the reference workload on this MLX device over a built-in sweep",
        description="Run the contract's reference workload over a built-in sweep on the current MLX device "
        "and append one JSONL record per (scenario, repeat) to <out>/<backend>-<mlx-version>-<yyyymmdd>.jsonl. "
        "Re-running skips finished runs.",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default: data/calibration)")
    parser.add_argument("--repeats", type=positive_int, default=None, help="runs per scenario (default: 1 on CPU, 3 on GPU)")
    parser.add_argument("--sweep", default="default", choices=sorted(SWEEPS), help="built-in sweep (default: default)")
    parser.add_argument("--limit", type=positive_int, default=None, help="measure only the first K scenarios")
    parser.add_argument("--match", default=None, help="measure only scenarios whose id contains this text")
    parser.add_argument("--date", default=None, help="yyyymmdd in the file name (default: today, UTC)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--list", action="store_true", help="print the sweep (id, split, policy) and exit")
    parser.set_defaults(func=run_calibrate)
    return parser


def _one_line_warning(message: Any, category: Any, filename: str, lineno: int, line: Any = None) -> str:
    return f"kvsim calibrate: warning: {message}\n"


def run_calibrate(args: argparse.Namespace) -> int:
    """Run the subcommand; errors are one line on stderr and exit status 2."""
    from kvsim.calibration.calibrate import calibrate
    from kvsim.calibration.datafile import CalibrationFileError
    from kvsim.calibration.sweep import build_sweep
    from kvsim.scenario.parse import ScenarioError

    if args.date is not None and not (len(args.date) == 8 and args.date.isdigit()):
        print(f"kvsim calibrate: --date: must be yyyymmdd, got {args.date!r}", file=sys.stderr)
        return 2
    if args.list:
        for item in build_sweep(args.sweep)[: args.limit]:
            print(f"{item.scenario.id}\t{item.split}\t{item.scenario.policy_name}\t{item.scenario.consumer}")
        return 0
    previous = warnings.formatwarning
    warnings.formatwarning = _one_line_warning  # type: ignore[assignment]
    try:
        run = calibrate(args.out, sweep=args.sweep, repeats=args.repeats, limit=args.limit, match=args.match,
                        date=args.date, progress=not args.no_progress)
    except (CalibrationFileError, ScenarioError, ValueError, OSError) as err:
        print(f"kvsim calibrate: {err}".splitlines()[0], file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = previous  # type: ignore[assignment]
    skipped = f", {len(run.skipped_ids)} scenarios skipped (no cache)" if run.skipped_ids else ""
    print(f"kvsim calibrate: {run.measured_runs} runs measured, {run.finished_before} already in {run.path}{skipped}",
          file=sys.stderr)
    return 0


def standalone_main(argv: list[str] | None = None) -> int:
    """``python -m kvsim.cli.calibrate calibrate ...`` without the lead's ``kvsim.cli.commands``."""
    parser = argparse.ArgumentParser(prog="kvsim")
    add_calibrate_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(standalone_main())
