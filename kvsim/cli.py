"""The ``kvsim`` command: predict (the contract), simulate (for people), calibrate, fit, validate."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from typing import Any

from kvsim.budget import check_cost
from kvsim.scenario import BACKENDS, Scenario, ScenarioError, parse_scenario

EXIT_INVALID = 2


def _fail(message: str) -> int:
    print(f"kvsim: {message}", file=sys.stderr)
    return EXIT_INVALID


def load_scenarios(path: str) -> list[Any]:
    """The scenario list of a JSON file; raises ``ValueError`` with a one-line message."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as err:
        raise ValueError(f"{path}: cannot read ({err.strerror})") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    if isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        raise ValueError(f"{path}: must hold a list of scenario objects, got {type(doc).__name__}")
    return doc


def parse_checked(obj: Any, backend: str | None) -> Scenario:
    scenario = parse_scenario(obj, backend)
    check_cost(scenario)
    return scenario


def cmd_predict(args: argparse.Namespace) -> int:
    """One JSON line per scenario, in input order; invalid ones get an error line, exit 2."""
    from kvsim.api import simulate

    try:
        objs = load_scenarios(args.scenarios)
    except ValueError as err:
        return _fail(str(err))
    status = 0
    for obj in objs:
        sid = obj.get("id") if isinstance(obj, dict) else None
        try:
            line = simulate(parse_checked(obj, args.backend), record_events=False).to_prediction()
        except ScenarioError as err:
            line, status = {"id": sid, "error": str(err)}, EXIT_INVALID
        except Exception as err:  # noqa: BLE001 - one bad scenario must not stop the others
            line, status = {"id": sid, "error": f"internal error: {type(err).__name__}: {err}"}, EXIT_INVALID
        print(json.dumps(line), flush=True)
    return status


def cmd_simulate(args: argparse.Namespace) -> int:
    """A readable table of each scenario's timeline, or ``--json`` / ``--csv``."""
    from kvsim.api import simulate
    from kvsim.report import summary_table, timeline_rows

    try:
        objs = load_scenarios(args.scenarios)
    except ValueError as err:
        return _fail(str(err))
    status = 0
    writer = csv.writer(sys.stdout) if args.csv else None
    for i, obj in enumerate(objs):
        try:
            result = simulate(parse_checked(obj, args.backend), memory_limit_bytes=args.limit_bytes)
        except ScenarioError as err:
            print(f"kvsim: scenario {i}: {err}", file=sys.stderr)
            status = EXIT_INVALID
            continue
        rows = timeline_rows(result)
        if args.json:
            print(json.dumps({**result.to_prediction(), "timeline": rows}))
        elif writer is not None:
            if i == 0:
                writer.writerow(["id", *rows[0].keys()])
            for row in rows:
                writer.writerow([result.scenario_id, *row.values()])
        else:
            print(summary_table(result, rows))
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvsim", description="KV-cache memory simulator for MLX inference engines")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="predict peak and final memory of scenarios (the contract)")
    p.add_argument("scenarios", help="JSON file with a list of scenario objects")
    p.add_argument("--backend", choices=BACKENDS, default=None, help="override each scenario's backend")
    p.set_defaults(func=cmd_predict)
    s = sub.add_parser("simulate", help="simulate scenarios and print a readable timeline")
    s.add_argument("scenarios", help="JSON file with a list of scenario objects")
    s.add_argument("--backend", choices=BACKENDS, default=None)
    s.add_argument("--limit-bytes", type=int, default=None, help="report the first step whose peak exceeds this")
    fmt = s.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON object per scenario")
    fmt.add_argument("--csv", action="store_true", help="the timeline as CSV")
    s.set_defaults(func=cmd_simulate)
    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands() -> list[Any]:
    from kvsim.cli_calibrate import add_calibrate_parser

    registers = [add_calibrate_parser]
    try:
        from kvsim.cli_fit import add_fit_parsers

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
