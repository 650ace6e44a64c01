"""Measure real mlx-lm generations with random weights, and compare them with ``kvsim generate``.

``measure``: for each shipped config (scaled down unless ``--full-size``), each workload, one real generation
as the contract's section 5 measures it (``kvsim.generation.measure``), appended to ``OUT/<split>.jsonl``.
Runs on the default MLX device: on a CUDA host (``mlx[cuda]``) the same command measures CUDA.
``report``: kvsim's prediction of every run in the files given, and the peak error per split.
``predict``: kvsim's prediction of runs not yet measured (the configs and workloads ``measure`` would take, full
size), appended to a jsonl file, to be committed before the runs are taken (a held-out set's test).

    python docs/tools/generation_runs.py measure --split train --configs llama-3.2-1b-instruct,qwen3-0.6b \\
        --out data/generation/mlx-cpu-0.32.4
    python docs/tools/generation_runs.py report data/generation/mlx-cpu-0.32.4/*.jsonl --backend mlx-cpu
    python docs/tools/generation_runs.py predict --configs qwen3-0.6b-4bit --workloads 1024:2048:32,8192:2048:16 \\
        --backend mlx-cuda --out data/generation/mlx-cuda-0.32.4/predictions/heldout6.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.measure import append_jsonl, measure, row_workload, run_row, scale_config

WORKLOADS = ((1024, 512, 64), (2048, 2048, 16), (3000, 1024, 200))
"""(prompt tokens, prefill step size, max tokens) of each run; --workloads overrides."""
SCALE = {"hidden_size": 256, "intermediate_size": 768, "vocab_size": 8192, "block_ff_dim": 768}
"""Widths of the scaled configs beyond ``measure.SCALE_KEYS``: an embedding as large as the layers, as in
real models."""
WIDTHS = {"phi-2": {"hidden_size": 320}}
"""Per-config widths: phi's partial rotary needs 0.4 x head_dim even."""


def parse_workloads(text: str | None) -> list[tuple[int, ...]]:
    """``N:step:K,...`` as (prompt tokens, prefill step size, max tokens) tuples; ``WORKLOADS`` if empty."""
    if not text:
        return list(WORKLOADS)
    try:
        out = [tuple(int(x) for x in w.split(":")) for w in text.split(",")]
    except ValueError:
        out = []
    if not out or any(len(w) != 3 or min(w) < 1 for w in out):
        raise SystemExit(f"generation_runs: --workloads wants N:step:K,... of positive integers, got {text!r}")
    return out


def cmd_measure(args: argparse.Namespace) -> int:
    workloads = parse_workloads(args.workloads)
    out = Path(args.out) / f"{args.split}.jsonl"
    for name in args.configs.split(","):
        config = load_model_config(name).config
        if not args.full_size:
            config = scale_config(config, args.layers, **{**SCALE, **WIDTHS.get(name, {})})
        for n, step, k in workloads:
            t = time.perf_counter()
            run = measure(name, config, n, k, step, seed=args.seed)
            append_jsonl(out, [run_row(run, args.split)])
            print(f"{name} N={n} step={step} K={k}: peak {run.peak_bytes} ({time.perf_counter() - t:.1f} s)",
                  file=sys.stderr, flush=True)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from kvsim.generation.model import build_model
    from kvsim.generation.predict import predict

    errors: dict[str, list[float]] = {}
    for path in args.files:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            built = build_model(ModelConfig(r["config"], r["name"]))
            w = row_workload(r)
            p = predict(built, w, args.backend)
            err = p.peak_bytes / r["peak_bytes"] - 1
            errors.setdefault(r["split"], []).append(err)
            row = {"split": r["split"], "name": r["name"], "prompt_tokens": w.prompt_tokens,
                   "prefill_step_size": w.prefill_step_size, "max_tokens": w.max_tokens,
                   "measured_peak_bytes": r["peak_bytes"], "peak_bytes": p.peak_bytes, "error": round(err, 5),
                   "weights_exact": p.weights_bytes == r.get("params_bytes", p.weights_bytes),
                   "kv_exact": p.kv_bytes == r["kv_bytes"]}
            if p.peak_low_bytes is not None:  # GPU backends: the predicted range
                row.update(peak_low_bytes=p.peak_low_bytes, peak_high_bytes=p.peak_high_bytes,
                           in_range=p.peak_low_bytes <= r["peak_bytes"] <= p.peak_high_bytes,
                           width=round(p.peak_high_bytes / p.peak_low_bytes, 3))
            print(json.dumps(row), flush=True)
    for split, errs in sorted(errors.items()):
        a = [abs(e) for e in errs]
        print(f"{split}: {len(a)} runs, peak error median {100 * statistics.median(a):.2f}% max {100 * max(a):.2f}%"
              f" (signed median {100 * statistics.median(errs):+.2f}%)", file=sys.stderr)
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    import mlx.core as mx
    import mlx_lm

    from kvsim.generation.model import build_model
    from kvsim.generation.predict import predict
    from kvsim.generation.schedule import Workload
    from kvsim.sim.profile import load_profile

    profile = dataclasses.replace(load_profile(args.backend), **dict(args.set or []))
    model_fields = {f.name: getattr(profile, f.name) for f in dataclasses.fields(profile) if f.name.startswith("model_")}
    workloads = parse_workloads(args.workloads)
    for name in args.configs.split(","):
        built = build_model(load_model_config(name))
        for n, step, k in workloads:
            p = predict(built, Workload(n, k, prefill_step_size=step), args.backend, profile=profile)
            row = {"name": name, "prompt_tokens": n, "prefill_step_size": step, "max_tokens": k,
                   "peak_bytes": p.peak_bytes, "peak_low_bytes": p.peak_low_bytes, "peak_high_bytes": p.peak_high_bytes,
                   "weights_bytes": p.weights_bytes, "kv_bytes": p.kv_bytes, "backend": args.backend,
                   "profile_model_fields": model_fields, **({"profile_set": dict(args.set)} if args.set else {}),
                   "mlx_version": mx.__version__, "mlx_lm_version": mlx_lm.__version__,
                   "note": "kvsim generate's prediction, made before the run was measured"}
            append_jsonl(Path(args.out), [row])
            print(f"{name} N={n}: {p.peak_bytes / 1e9:.2f} GB [{(p.peak_low_bytes or 0) / 1e9:.2f}, "
                  f"{(p.peak_high_bytes or 0) / 1e9:.2f}]", file=sys.stderr, flush=True)
    return 0


def _profile_field(text: str) -> tuple[str, int | float | str | bool]:
    """argparse type: ``FIELD=VALUE`` naming a numeric profile field (an int field takes an int), a true/false one, or
    a string field of a few values (``CHOICES``), else one line naming it."""
    from kvsim.sim.profile import CHOICES, BackendProfile

    name, _, value = text.partition("=")
    defaults = {f.name: f.default for f in dataclasses.fields(BackendProfile)}
    if name in CHOICES:
        if value not in CHOICES[name]:
            raise argparse.ArgumentTypeError(f"{name}: {value!r} is not one of {', '.join(CHOICES[name])}")
        return name, value
    if isinstance(defaults.get(name), bool):
        if value not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{name}: {value!r} is not true or false")
        return name, value == "true"
    if not isinstance(defaults.get(name), int | float) or isinstance(defaults[name], bool):
        raise argparse.ArgumentTypeError(f"no numeric profile field {name!r}")
    try:
        return name, type(defaults[name])(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: {value!r} is not a valid {type(defaults[name]).__name__}") from None


def _existing_file(path: str) -> str:
    """argparse type: a readable file, else one line naming it."""
    if not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {path}")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--configs", required=True, help="comma-separated shipped config names (or paths)")
    m.add_argument("--split", required=True, choices=("train", "validation", "heldout", "repeat"))
    m.add_argument("--out", required=True, help="folder for <split>.jsonl")
    m.add_argument("--layers", type=int, default=4)
    m.add_argument("--full-size", action="store_true", help="the configs as published (a GPU host)")
    m.add_argument("--workloads", default=None, help=f"N:step:K,... (default: {WORKLOADS})")
    m.add_argument("--seed", type=int, default=0)
    m.set_defaults(func=cmd_measure)
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+", type=_existing_file)
    r.add_argument("--backend", default="mlx-cpu", choices=("mlx-cpu", "mlx-cuda", "mlx-metal"))
    r.set_defaults(func=cmd_report)
    q = sub.add_parser("predict")
    q.add_argument("--configs", required=True, help="comma-separated shipped config names (or paths)")
    q.add_argument("--workloads", default=None, help=f"N:step:K,... (default: {WORKLOADS})")
    q.add_argument("--backend", default="mlx-cuda", choices=("mlx-cpu", "mlx-cuda", "mlx-metal"))
    q.add_argument("--out", required=True, help="jsonl file the predictions are appended to")
    q.add_argument("--set", action="append", type=_profile_field, metavar="FIELD=VALUE",
                   help="predict under the backend's profile with this field changed (a candidate); repeatable")
    q.set_defaults(func=cmd_predict)
    args = parser.parse_args()
    from kvsim.core.errors import KvsimError

    try:
        return int(args.func(args))
    except KvsimError as e:  # a config name or field: one line, not a traceback
        raise SystemExit(f"generation_runs: {e}") from None


if __name__ == "__main__":
    sys.exit(main())
