"""Every growth policy side by side on real MLX: peak, peak over steady, over-allocation, speed.

Runs the contract's reference workload (``kvsim.calibration.measure.run_reference``) for each policy, in
A B B A order (every policy twice, the second pass reversed, after one unrecorded warm-up run
per workload), prints a table and writes
``<out>/<backend>-mlx<version>-<yyyymmdd>.json`` atomically.

    python docs/tools/bench_policies.py            # sizes picked for the backend (GPU: full, CPU: reduced)
    python docs/tools/bench_policies.py --quick    # smoke run, seconds
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mlx.core as mx  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402
from mlx_lm.models import cache as lm_cache  # noqa: E402

from kvsim.calibration.measure import device_info, mlx_backend_name, run_reference  # noqa: E402
from kvsim.scenario.parse import Scenario, parse_scenario  # noqa: E402
from policies.mlx import cache_for  # noqa: E402

MIB = 1 << 20
REF = "mlx-lm KVCache"
REF_Q = "mlx-lm QuantizedKVCache"
UNIFORM = {"n_layers": 32, "kv_heads": 8, "head_dim": 128, "dtype": "bfloat16"}
DS4 = {"preset": "deepseek-v4-flash"}  # 41 compressed layers: ratio 4 / 128 alternating (layers 0-1 hold none)

# (prompt_tokens, prefill_chunk, decode_tokens) per workload and size profile.
SIZES: dict[str, dict[str, tuple[int, int, int]]] = {
    "full": {"uniform-sdpa": (8192, 2048, 1024), "ds4-sdpa": (8192, 2048, 1024), "uniform-last_row": (8192, 2048, 1024)},
    "cpu": {"uniform-sdpa": (512, 256, 256), "ds4-sdpa": (2048, 512, 256), "uniform-last_row": (8192, 2048, 1024)},
    "quick": {"uniform-sdpa": (200, 64, 16), "ds4-sdpa": (512, 256, 16), "uniform-last_row": (200, 64, 16)},
}
LAYERS = {"full": 32, "cpu": 32, "quick": 4}  # layers of the uniform model


def policies_for(workload: str, total_tokens: int) -> list[tuple[str, dict[str, Any] | None]]:
    """(label, policy dict) pairs; ``None`` marks an mlx-lm reference class."""
    window = max(256, total_tokens // 2)
    out: list[tuple[str, dict[str, Any] | None]] = [
        (REF, None),
        ("step", {"name": "step"}),
        ("prealloc", {"name": "prealloc", "max_size": total_tokens}),
        ("geometric", {"name": "geometric", "seed_rows": 256, "factor": 2, "cap": "context"}),
        ("full", {"name": "full"}),
        (f"rotating-{window}", {"name": "rotating", "max_size": window}),
        ("lowpeak", {"name": "lowpeak"}),
    ]
    if workload.endswith("last_row"):  # run_reference reads quantized K/V by last row, even under sdpa
        out += [(REF_Q, None), ("quantized", {"name": "quantized", "bits": 8, "group_size": 64})]
    return out


def make_scenario(workload: str, profile: str, policy: dict[str, Any] | None) -> Scenario:
    sizes = SIZES[profile][workload]
    prompt, chunk, decode = sizes
    uniform = {**UNIFORM, "n_layers": LAYERS[profile]}
    return parse_scenario(
        {
            "id": workload,
            "model": DS4 if workload.startswith("ds4") else uniform,
            "policy": policy or {"name": "step"},
            "workload": {"prompt_tokens": prompt, "prefill_chunk": chunk, "decode_tokens": decode},
            "consumer": workload.split("-", 1)[1],
        }
    )


def _factory(label: str, made: list[Any]) -> Any:
    def factory(sc: Scenario, i: int) -> Any:
        if label == REF:
            lm_cache.KVCache.step = 256
            cache: Any = lm_cache.KVCache()
        elif label == REF_Q:
            cache = lm_cache.QuantizedKVCache(group_size=64, bits=8)
        else:
            cache = cache_for(sc.policy_dict(), context_tokens=sc.workload.total_tokens, ratio=sc.model.layers[i].ratio)
        made.append(cache)
        return cache

    return factory


def _live_bytes(cache: Any) -> int:
    if cache.keys is None:
        return 0
    return sum(x.nbytes for _, x in tree_flatten(cache.keys_and_values()))


def run_one(workload: str, profile: str, label: str, policy: dict[str, Any] | None) -> dict[str, Any]:
    """One measured run of one policy; bytes are relative to the run's baseline."""
    made: list[Any] = []
    gc.collect()
    m = run_reference(make_scenario(workload, profile, policy), _factory(label, made))
    capacity = sum(c.nbytes for c in made)
    live = sum(_live_bytes(c) for c in made)
    made.clear()
    prefill = [s for s in m.steps if s.tokens > 1]
    decode = [s for s in m.steps if s.tokens == 1]
    steady = m.final_active_bytes
    decode_s = sum(s.wall_s for s in decode)
    return {
        "workload": workload,
        "policy": label,
        "policy_dict": policy,
        "cache_impl": m.cache_impl,
        "peak_bytes": m.peak_bytes,
        "steady_bytes": steady,
        "prefill_peak_bytes": max((s.peak_bytes for s in prefill), default=0),
        "decode_peak_bytes": max((s.peak_bytes for s in decode), default=0),
        "capacity_bytes": capacity,
        "live_bytes": live,
        "prefill_s": sum(s.wall_s for s in prefill),
        "decode_s": decode_s,
        "decode_tokens_per_s": len(decode) / decode_s if decode_s > 0 else None,
    }


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (workload, policy): peaks are the worst run, times the mean of the runs."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in runs:
        key = (r["workload"], r["policy"])
        row = rows.setdefault(key, {**r, "runs": 0, "peak_bytes_runs": [], "tps_runs": [], "prefill_s_runs": []})
        row["runs"] += 1
        row["peak_bytes_runs"].append(r["peak_bytes"])
        row["tps_runs"].append(r["decode_tokens_per_s"])
        row["prefill_s_runs"].append(r["prefill_s"])
        for k in ("peak_bytes", "prefill_peak_bytes", "decode_peak_bytes"):
            row[k] = max(row[k], r[k])
    out = []
    for (workload, _), row in rows.items():
        tps = [t for t in row["tps_runs"] if t]
        row["decode_tokens_per_s"] = sum(tps) / len(tps) if tps else None
        row["prefill_s"] = sum(row["prefill_s_runs"]) / len(row["prefill_s_runs"])
        steady = row["steady_bytes"] or 1
        row["peak_over_steady"] = row["peak_bytes"] / steady
        row["decode_peak_over_steady"] = row["decode_peak_bytes"] / steady
        row["over_allocation"] = row["capacity_bytes"] / row["live_bytes"] - 1 if row["live_bytes"] else None
        ref = rows.get((workload, REF))
        ref_tps = ref and ref.get("decode_tokens_per_s")
        row["tps_vs_mlx_lm"] = row["decode_tokens_per_s"] / ref_tps if ref_tps and row["decode_tokens_per_s"] else None
        for k in ("decode_s", "tps_runs"):
            row.pop(k, None)
        out.append(row)
    return out


def format_table(rows: list[dict[str, Any]]) -> str:
    head = f"{'workload':<17}{'policy':<24}{'peak MiB':>10}{'steady MiB':>11}{'peak/st':>8}{'dec pk/st':>10}"
    head += f"{'over-alloc':>11}{'prefill s':>10}{'dec tok/s':>10}{'vs mlx-lm':>10}"
    lines = [head, "-" * len(head)]
    for r in rows:
        def f(v: Any, fmt: str) -> str:
            return "-" if v is None else format(v, fmt)

        lines.append(
            f"{r['workload']:<17}{r['policy']:<24}{r['peak_bytes'] / MIB:>10.1f}{r['steady_bytes'] / MIB:>11.1f}"
            f"{r['peak_over_steady']:>8.3f}{r['decode_peak_over_steady']:>10.3f}{f(r['over_allocation'], '.1%'):>11}"
            f"{r['prefill_s']:>10.2f}{f(r['decode_tokens_per_s'], '.1f'):>10}{f(r['tps_vs_mlx_lm'], '.3f'):>10}"
        )
    return "\n".join(lines)


def write_atomic(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of seconds")
    ap.add_argument("--sizes", choices=sorted(SIZES), help="size profile (default: full on a GPU, cpu on the CPU)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "data" / "bench", help="output folder")
    args = ap.parse_args(argv)
    backend = mlx_backend_name()
    profile = "quick" if args.quick else args.sizes or ("cpu" if backend == "mlx-cpu" else "full")
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    for workload, sizes in SIZES[profile].items():
        pols = policies_for(workload, sizes[0] + sizes[2])
        run_one(workload, profile, *pols[0])  # warm-up, not recorded: the first run pays one-time costs
        for label, policy in pols + pols[::-1]:  # A B ... B A
            runs.append(run_one(workload, profile, label, policy))
            print(f"  {workload} {label}: peak {runs[-1]['peak_bytes'] / MIB:.1f} MiB", file=sys.stderr, flush=True)
    rows = summarize(runs)
    print(format_table(rows))
    info = device_info()
    stamp = datetime.datetime.now(datetime.timezone.utc)
    doc = {
        "kind": "kvsim-bench-policies",
        "created_utc": stamp.isoformat(timespec="seconds"),
        "command": " ".join(["python", "docs/tools/bench_policies.py", *(argv if argv is not None else sys.argv[1:])]),
        "profile": profile,
        "sizes": {k: dict(zip(("prompt_tokens", "prefill_chunk", "decode_tokens"), v)) for k, v in SIZES[profile].items()},
        "models": {"uniform": {**UNIFORM, "n_layers": LAYERS[profile]}, "ds4": DS4},
        "mlx_version": mx.__version__,
        "mlx_lm_version": info.get("mlx_lm_version"),
        "device_info": info,
        "wall_s": time.perf_counter() - started,
        "rows": rows,
        "runs": runs,
    }
    path = args.out / f"{backend}-mlx{mx.__version__}-{stamp:%Y%m%d}{'-quick' if args.quick else ''}.json"
    write_atomic(path, doc)
    print(f"wrote {path} ({doc['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
