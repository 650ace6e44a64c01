"""The ``kvsim`` command: predict (the contract), simulate (for people), calibrate, fit, validate."""

from __future__ import annotations

import argparse
import csv
import json
import signal
import sys
from collections.abc import Sequence
from typing import Any

from kvsim.cli.predict_pool import simulate_each
from kvsim.scenario.parse import BACKENDS

EXIT_INVALID = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXACT_HELP = "replay every growth step op by op (the reference) instead of deriving repeating cycles"


def _fail(message: str) -> int:
    print(f"kvsim: {message}", file=sys.stderr)
    return EXIT_INVALID


def load_scenarios(path: str) -> list[Any]:
    """The scenario list of a JSON file (``-``: stdin); raises ``ValueError`` with a one-line message."""
    try:
        if path == "-":  # the contract's list on stdin
            doc = json.load(sys.stdin)
        else:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
    except OSError as err:
        raise ValueError(f"{path}: cannot read ({err.strerror})") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    if isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        raise ValueError(f"{path}: must hold a list of scenario objects, got {type(doc).__name__}")
    return doc


def cmd_predict(args: argparse.Namespace) -> int:
    """One JSON line per scenario, in input order; invalid ones get an error line, exit 2.

    Scenarios are predicted by a process pool (``--jobs``, all cores by default); lines come back
    in input order. Ctrl-C stops the workers and exits 130 with every line printed so far whole.
    """
    from kvsim.cli.predict_pool import predict_lines

    try:
        objs = load_scenarios(args.scenarios)
    except ValueError as err:
        return _fail(str(err))
    status = 0
    try:
        for line, failed in predict_lines(objs, args.backend, args.jobs, args.exact):
            status = EXIT_INVALID if failed else status
            write_line(line)
    except KeyboardInterrupt:
        print("kvsim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return status


def write_line(line: str) -> None:
    """Print one line whole: SIGINT is held back while it is written and flushed."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a pending Ctrl-C is raised here


def cmd_simulate(args: argparse.Namespace) -> int:
    """A readable table of each scenario's timeline, or ``--json`` / ``--csv``."""
    from kvsim.sim.report import summary_table, timeline_rows

    try:
        objs = load_scenarios(args.scenarios)
    except ValueError as err:
        return _fail(str(err))
    status = 0
    writer = csv.writer(sys.stdout) if args.csv else None
    header_written = False
    for i, (sid, result, error) in enumerate(simulate_each(objs, args.backend, memory_limit_bytes=args.limit_bytes,
                                                                 exact=args.exact)):
        if error is not None:
            print(f"kvsim: scenario {i} ({sid!r}): {error}", file=sys.stderr)
            status = EXIT_INVALID
            continue
        rows = timeline_rows(result)
        if args.json:
            print(json.dumps({**result.to_prediction(), "timeline": rows}))
        elif writer is not None:
            if not header_written:
                writer.writerow(["id", *rows[0].keys()])
                header_written = True
            for row in rows:
                writer.writerow([result.scenario_id, *row.values()])
        else:
            print(summary_table(result, rows))
    return status


def build_parser() -> argparse.ArgumentParser:
    from kvsim.cli.calibrate import positive_int

    parser = argparse.ArgumentParser(prog="kvsim", description="KV-cache memory simulator for MLX inference engines")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="predict peak and final memory of scenarios (the contract)")
    p.add_argument("scenarios", help="JSON file with a list of scenario objects; - reads stdin")
    p.add_argument("--backend", choices=BACKENDS, default=None, help="override each scenario's backend")
    p.add_argument("--jobs", type=positive_int, default=None, help="worker processes (default: all cores)")
    p.add_argument("--exact", action="store_true", help=EXACT_HELP)
    p.set_defaults(func=cmd_predict)
    s = sub.add_parser("simulate", help="simulate scenarios and print a readable timeline")
    s.add_argument("scenarios", help="JSON file with a list of scenario objects")
    s.add_argument("--backend", choices=BACKENDS, default=None)
    s.add_argument("--limit-bytes", type=positive_int, default=None, help="report the first step whose peak exceeds this")
    s.add_argument("--exact", action="store_true", help=EXACT_HELP)
    fmt = s.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON object per scenario")
    fmt.add_argument("--csv", action="store_true", help="the timeline as CSV")
    s.set_defaults(func=cmd_simulate)
    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands() -> list[Any]:
    from kvsim.cli.calibrate import add_calibrate_parser
    from kvsim.cli.generate import add_generate_parser

    registers = [add_calibrate_parser, add_generate_parser]
    try:
        from kvsim.cli.fit import add_fit_parsers

        registers.append(add_fit_parsers)
    except ImportError:
        pass
    return registers


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return _fail("interrupted")
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
