"""Measure the resident footprint and buffer cache of real mlx-lm generations, and compare with ``kvsim generate``.

``measure``: each run in a fresh Python process (``kvsim.generation.measure.measure_fresh``): the process's RSS
before the model, with the weights, at most during the generation (``VmHWM``, reset just before it) and after,
plus ``mx.get_cache_memory()`` at the end; rows appended to ``OUT`` (Linux only: ``/proc/self``).
``report``: for every row of the files given, kvsim's predicted resident footprint and end cache against the
measured ones, with errors; rows without RSS fields (the peak runs) report the cache only.

    python docs/tools/resident_runs.py measure --configs llama-3.2-1b-instruct,qwen3-30b-a3b \\
        --out data/generation/mlx-cpu-0.32.4/resident.jsonl
    python docs/tools/resident_runs.py report data/generation/mlx-cpu-0.32.4/resident.jsonl --backend mlx-cpu
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generation_runs import SCALE, WIDTHS, WORKLOADS, _existing_file, parse_workloads  # noqa: E402

from kvsim.generation.config import ModelConfig, load_model_config  # noqa: E402
from kvsim.generation.measure import append_jsonl, measure_fresh, row_workload, run_row, scale_config  # noqa: E402


def cmd_measure(args: argparse.Namespace) -> int:
    workloads = parse_workloads(args.workloads)
    for name in args.configs.split(","):
        config = scale_config(load_model_config(name).config, args.layers,
                              **{**SCALE, **WIDTHS.get(name, {}), **json.loads(args.widths)})
        for n, step, k in workloads:
            t = time.perf_counter()
            run = measure_fresh(name, config, n, k, step, seed=args.seed)
            append_jsonl(Path(args.out), [run_row(run, args.split)])
            print(f"{name} N={n} step={step} K={k}: peak {run.peak_bytes}, max RSS {run.max_rss_bytes}, "
                  f"cache {run.cache_bytes} ({time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
    return 0


def _err(predicted: int, measured: int) -> float:
    return predicted / measured - 1 if measured else float(predicted != 0)


def cmd_report(args: argparse.Namespace) -> int:
    from kvsim.generation.model import build_model
    from kvsim.generation.predict import predict

    errors: dict[str, list[float]] = {}
    for path in args.files:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            w = row_workload(r)
            p = predict(build_model(ModelConfig(r["config"], r["name"])), w, args.backend)
            row = {"split": r["split"], "name": r["name"], "prompt_tokens": w.prompt_tokens,
                   "prefill_step_size": w.prefill_step_size, "max_tokens": w.max_tokens,
                   "peak_error": round(_err(p.peak_bytes, r["peak_bytes"]), 5),
                   "measured_cache_bytes": r["cache_bytes"], "cache_bytes": p.cache_bytes,
                   "cache_diff_bytes": p.cache_bytes - r["cache_bytes"]}
            errors.setdefault("peak", []).append(row["peak_error"])
            errors.setdefault("cache_diff_mb", []).append(row["cache_diff_bytes"] / 1e6)
            if r.get("max_rss_bytes") is not None:
                above = r["max_rss_bytes"] - r["baseline_rss_bytes"]  # what the generation's process added
                row.update(measured_resident_bytes=r["max_rss_bytes"], resident_bytes=p.resident_bytes,
                           resident_error=round(_err(p.resident_bytes, r["max_rss_bytes"]), 5),
                           measured_above_baseline_bytes=above, footprint_bytes=p.footprint_bytes,
                           footprint_error=round(_err(p.footprint_bytes, above), 5),
                           measured_baseline_bytes=r["baseline_rss_bytes"])
                for key in ("resident_error", "footprint_error"):
                    errors.setdefault(key.removesuffix("_error"), []).append(row[key])
            print(json.dumps(row), flush=True)
    for key, errs in errors.items():
        a = [abs(e) for e in errs]
        unit = " MB" if key.endswith("_mb") else "%"
        scale = 1 if key.endswith("_mb") else 100
        print(f"{key}: {len(a)} runs, |error| median {scale * statistics.median(a):.2f}{unit} max "
              f"{scale * max(a):.2f}{unit} (signed median {scale * statistics.median(errs):+.2f}{unit})",
              file=sys.stderr)
    return 0



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--configs", required=True, help="comma-separated shipped config names (or paths)")
    m.add_argument("--split", default="resident", help="the rows' split label")
    m.add_argument("--out", required=True, help="the jsonl file rows are appended to")
    m.add_argument("--layers", type=int, default=4)
    m.add_argument("--widths", default="{}", help="JSON object of widths over generation_runs.SCALE")
    m.add_argument("--workloads", default=None, help=f"N:step:K,... (default: {WORKLOADS})")
    m.add_argument("--seed", type=int, default=0)
    m.set_defaults(func=cmd_measure)
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+", type=_existing_file)
    r.add_argument("--backend", default="mlx-cpu", choices=("mlx-cpu", "mlx-cuda", "mlx-metal"))
    r.set_defaults(func=cmd_report)
    args = parser.parse_args()
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
