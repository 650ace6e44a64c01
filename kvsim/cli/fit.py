"""argparse wiring for ``kvsim fit`` and ``kvsim validate`` (registered by ``kvsim.cli.commands``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kvsim.cli.calibrate import positive_int
from kvsim.core.paths import CALIBRATION_DIR
from kvsim.scenario.parse import BACKENDS
from kvsim.sim.profile import DEFAULTS, PROFILES_DIR

DEFAULT_DATA = CALIBRATION_DIR
EXIT_INVALID = 2


def _fail(command: str, message: Any) -> int:
    print(f"kvsim {command}: {str(message).splitlines()[0]}", file=sys.stderr)
    return EXIT_INVALID


def _add_data_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", nargs="+", default=[str(DEFAULT_DATA)], metavar="FILE",
                        help="calibration .jsonl files or directories (default: data/calibration)")
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="use only files of this backend (required when the files mix backends)")


def add_fit_parsers(subparsers: Any) -> None:
    """Register ``fit`` and ``validate``; each sets ``func(args) -> exit status``."""
    fit = subparsers.add_parser("fit", help="fit a backend profile's timing parameters to calibration data (train split)")
    _add_data_args(fit)
    fit.add_argument("--out", default=str(PROFILES_DIR), help="profile directory (default: the shipped kvsim/data/profiles)")
    fit.add_argument("--max-evals", type=positive_int, default=120, help="simulator sweeps for the shape fit (default: 120)")
    fit.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    fit.add_argument("--load-only", action="store_true",
                     help="CPU: fit only the load range (load_transient_share, load_high_margin) into <out>/<backend>.json")
    fit.set_defaults(func=run_fit)
    val = subparsers.add_parser("validate", help="predicted vs measured peak, final active memory and decode time")
    _add_data_args(val)
    val.add_argument("--split", choices=("validation", "train", "all"), default="validation")
    val.add_argument("--profile", default=None, metavar="FILE",
                     help="profile JSON to validate (default: the shipped kvsim/data/profiles/<backend>.json)")
    val.add_argument("--json", action="store_true", help="one machine-readable JSON object")
    val.set_defaults(func=run_validate)


def _load(args: argparse.Namespace, command: str) -> tuple[list[dict[str, Any]], list[Any]] | int:
    from kvsim.calibration.datafile import CalibrationFileError
    from kvsim.calibration.validate import load_observations
    from kvsim.scenario.parse import ScenarioError

    try:
        return load_observations(args.data, backend=args.backend)
    except (CalibrationFileError, ScenarioError, ValueError) as err:
        return _fail(command, err)


def run_fit(args: argparse.Namespace) -> int:
    """``kvsim fit``: write ``<out>/<backend>.json`` from the train split."""
    from dataclasses import replace

    from kvsim.calibration.datafile import calibration_paths
    from kvsim.calibration.fit import fit_metadata, fit_profile
    from kvsim.sim.profile import save_profile

    loaded = _load(args, "fit")
    if isinstance(loaded, int):
        return loaded
    headers, observations = loaded
    backend, version = headers[0]["backend"], headers[0]["mlx_version"]
    start = replace(DEFAULTS[backend], mlx_version=version)
    log = (lambda _: None) if args.quiet else (lambda line: print(f"kvsim fit: {line}", file=sys.stderr, flush=True))
    log(f"{backend} MLX {version}: {sum(o.split == 'train' for o in observations)} train scenarios")
    if args.load_only:
        from kvsim.calibration.datafile import calibration_paths
        from kvsim.calibration.fit import refit_load

        try:
            path = refit_load(observations, Path(args.out) / f"{backend}.json", [str(p) for p in calibration_paths(args.data)], log)
        except (OSError, ValueError) as err:
            return _fail("fit", err)
        print(f"kvsim fit: wrote the load range into {path}")
        return 0
    try:
        result = fit_profile(observations, start, max_evals=args.max_evals, log=log)
    except ValueError as err:
        return _fail("fit", err)
    files = sorted({s for o in observations for s in o.sources})
    paths = [str(p) for p in calibration_paths(args.data)]
    used = [p for p in paths if Path(p).name in files]
    meta = fit_metadata(result, headers, used)
    try:
        path = save_profile(result.profile, meta, Path(args.out))
    except OSError as err:
        return _fail("fit", f"--out: cannot write {args.out} ({err.strerror})")
    s = meta["fit"]["train_summary"]
    print(f"kvsim fit: wrote {path} ({len(result.train_rows)} train scenarios, {result.evaluations} simulator sweeps, "
          f"{result.seconds:.0f} s; train peak median |err| {s['peak_abs_err_pct']['median']:.3f}%, "
          f"max {s['peak_abs_err_pct']['max']:.3f}%)")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    """``kvsim validate``: a table (or ``--json``) of predicted vs measured on one split."""
    from kvsim.calibration.validate import validate
    from kvsim.sim.profile import load_profile, profile_from_file

    loaded = _load(args, "validate")
    if isinstance(loaded, int):
        return loaded
    headers, observations = loaded
    backend, version = headers[0]["backend"], headers[0]["mlx_version"]
    try:
        profile = profile_from_file(args.profile, backend) if args.profile else load_profile(backend)
        report = validate(observations, profile, args.split)
    except ValueError as err:
        return _fail("validate", err)
    if not report["rows"]:
        return _fail("validate", f"--split: no {args.split} records in the data")
    report["data_mlx_version"] = version
    if version != profile.mlx_version:  # allowed (that is how a new release is checked), but never silently
        print(f"kvsim validate: warning: the data is MLX {version}, the profile was fitted on MLX {profile.mlx_version}; "
              f"allocators change between releases: refit with kvsim fit", file=sys.stderr)
    report["data_files"] = sorted({s for o in observations for s in o.sources})
    if args.json:
        print(json.dumps(report, default=_json_default))
    else:
        print(text_report(report))
    return 0


def _json_default(obj: Any) -> Any:
    return str(obj)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.2f}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def text_report(report: dict[str, Any]) -> str:
    """The ``kvsim validate`` table: one line per scenario, then the summary and targets."""
    gpu = report["rows"] and "runs_in_range" in report["rows"][0]
    head = ["id", "runs", "meas MiB", "pred MiB", "peak %", "final %"]
    head += ["in range", "hi/lo"] if gpu else []
    head += ["meas ms", "pred ms", "decode %"]
    probed = any(r.get("host_factor") for r in report["rows"])
    head += ["host x"] if probed else []
    lines = []
    for r in report["rows"]:
        cells = [str(r["id"]), str(r["runs"]), _mib(r["measured_peak_bytes"]), _mib(r["predicted_peak_bytes"]),
                 _pct(r["peak_err_pct"]), _pct(r["final_err_pct"])]
        cells += [f"{r['runs_in_range']}/{r['runs']}", f"{r['range_width']:.3f}"] if gpu else []
        cells += [_ms(r["measured_decode_s"]), _ms(r["predicted_decode_s"]), _pct(r["decode_err_pct"])]
        cells += ["-" if not r.get("host_factor") else f"{r['host_factor']:.3f}"] if probed else []
        lines.append(cells)
    widths = [max(len(c) for c in col) for col in zip(head, *lines)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    s = report["summary"]
    out = [f"{report['backend']} (profile {report['profile_status']}, MLX {report['profile_mlx_version']}; "
           f"data MLX {report['data_mlx_version']}), split {report['split']}: {s['scenarios']} scenarios",
           fmt(head), *map(fmt, lines), ""]
    for name in ("peak", "final", "decode"):
        st = s[f"{name}_abs_err_pct"]
        if st["median"] is not None:
            out.append(f"{name:6s} |err|: median {st['median']:.3f}%, max {st['max']:.3f}%")
    if probed:
        out.append("meas ms: the fastest run's median decode step, in the fitting host's time "
                   "(x fitting host's probe / the file's probe); host x: how much slower the runs' host probed")
    if gpu:
        out.append(f"runs in range: {s['runs_in_range']}/{s['runs']}, widest range {s['max_range_width']:.3f}x")
    out += [f"target {'met ' if ok else 'MISSED'}  {name}" for name, ok in s["targets"].items()]
    return "\n".join(out)
