"""Write docs/findings.md from the shipped measurements: calibration runs and the policy bench.

Per backend (CPU here, CUDA on an H200): does a decode growth step peak at ``N·new + old`` or at
``N·(new + old)``? How far above the steady cache is each policy's transient? Does pre-allocation
slow decode? Every figure is computed from ``data/calibration/*.jsonl`` and ``data/bench/*.json``.
Usage: ``python docs/tools/findings.py [--out docs/findings.md]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from kvsim.calibration.datafile import read_calibration

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = {"mlx-cpu": "CPU (this 2-core x86 machine)", "mlx-cuda": "CUDA (NVIDIA H200)"}


def growth_rows(records: list[dict]) -> list[dict]:
    """Each decode growth step of the uniform step-policy runs: peak, steady and both forms."""
    rows = []
    for rec in records:
        sc = rec["scenario"]
        layers = sc["model"]["layers"]
        if sc["policy"]["name"] != "step" or any(x.get("ratio", 1) != 1 for x in layers):
            continue
        s, n = rec["steps"], len(layers)
        for i in range(1, len(s["tokens"])):
            old, new = s["active_bytes"][i - 1], s["active_bytes"][i]
            if s["tokens"][i] == 1 and new > old:
                rows.append({"id": rec["id"], "repeat": rec["repeat"], "step": i, "steady": old,
                             "peak": s["peak_bytes"][i], "one": new + old / n, "all": new + old})
    return rows


def transient(records: list[dict]) -> dict[str, list[float]]:
    """Per policy: each run's largest decode-step peak over the active memory before it."""
    out: dict[str, list[float]] = defaultdict(list)
    for rec in records:
        s = rec["steps"]
        ratios = [s["peak_bytes"][i] / s["active_bytes"][i - 1]
                  for i in range(1, len(s["tokens"])) if s["tokens"][i] == 1 and s["active_bytes"][i - 1]]
        if ratios:
            out[rec["scenario"]["policy"]["name"]].append(max(ratios))
    return out


def pct(x: float) -> str:
    return f"{x:+.1f}%"


def backend_section(backend: str, path: Path, answers: list[str]) -> list[str]:
    header, records = read_calibration(path)
    rows = growth_rows(records)
    err = {k: [100 * (r[k] - r["peak"]) / r["peak"] for r in rows] for k in ("one", "all")}
    ratio = [r["peak"] / r["steady"] for r in rows]
    answers.append(
        f"- **{BACKENDS[backend]}:** a decode growth step of mlx-lm's `KVCache` peaks at {statistics.median(ratio):.2f}× "
        f"the steady cache (median of {len(rows)} steps; {min(ratio):.2f}–{max(ratio):.2f}). `N·new + old` is "
        f"below every measured peak ({pct(max(err['one']))} at best, median {pct(statistics.median(err['one']))}); "
        f"`N·(new + old)` is right on the median ({pct(statistics.median(err['all']))}) but spans "
        f"{pct(min(err['all']))} to {pct(max(err['all']))}: small models peak above it (every layer's zeros, "
        "concatenation and old buffer are in flight before any free lands), large ones below it (MLX's 10-task "
        "throttle and, on CUDA, each command buffer's completion free old buffers part-way through the step)."
    )
    by_id: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_id[(r["id"], r["step"])].append(r)
    lines = [f"## {BACKENDS[backend]}", "",
             f"Data: `{path.relative_to(ROOT)}` (MLX {header['mlx_version']}, mlx-lm {header.get('mlx_lm_version')}, "
             f"{len({r['id'] for r in records})} scenarios × {max(r['repeat'] for r in records) + 1} runs).", "",
             f"**Growth peaks.** {len(rows)} decode growth steps of the uniform `step`-policy runs (mlx-lm "
             "`KVCache`). Per layer, K and V together, `old` is the cache before the step and `new` after it; "
             "errors are (form − measured) / measured.", "",
             "| predictor | median error | range of errors |", "|---|---:|---:|",
             f"| `N·new + old` | {pct(statistics.median(err['one']))} | {pct(min(err['one']))} … {pct(max(err['one']))} |",
             f"| `N·(new + old)` | {pct(statistics.median(err['all']))} | {pct(min(err['all']))} … {pct(max(err['all']))} |",
             "", "Measured peak over the steady cache at these steps: median "
             f"{statistics.median(r['peak'] / r['steady'] for r in rows):.2f}, range "
             f"{min(r['peak'] / r['steady'] for r in rows):.2f}–{max(r['peak'] / r['steady'] for r in rows):.2f}."]
    spreads = [max(x["peak"] for x in v) / min(x["peak"] for x in v) for v in by_id.values() if len(v) > 1]
    if spreads:
        lines.append(f"The same growth step's peak varies between runs by up to {100 * (max(spreads) - 1):.0f}% "
                     f"(median {100 * (statistics.median(spreads) - 1):.1f}%).")
    lines += ["", "**Transient per policy** (largest decode-step peak over the active memory before it, per run):", "",
              "| policy | runs | median | max |", "|---|---:|---:|---:|"]
    for name, vals in sorted(transient(records).items()):
        lines.append(f"| `{name}` | {len(vals)} | {statistics.median(vals):.3f} | {max(vals):.3f} |")
    return lines + [""]


def bench_answer(path: Path) -> str:
    """One line: pre-allocation's decode speed against the noise band of identical caches."""
    doc = json.loads(path.read_text())
    rows = doc["rows"]
    pre = [r["tps_vs_mlx_lm"] for r in rows if r["policy"] in ("prealloc", "full")]
    noise = [r["tps_vs_mlx_lm"] for r in rows if r["policy"] == "step"]
    return (f"- **Pre-allocation, {doc['device_info']['backend']}:** `prealloc`/`full` decode at "
            f"{min(pre):.2f}–{max(pre):.2f}× mlx-lm's `KVCache` tokens/s over {len({r['workload'] for r in rows})} "
            f"workloads, where the identical `step` cache lands at {min(noise):.2f}–{max(noise):.2f}× "
            f"(run-to-run noise). No slowdown beyond that noise is measurable; where a ratio is well above 1 "
            "(few-row reads), pre-allocation is faster because it skips the growth steps.")


def bench_section(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    lines = [f"### `{path.relative_to(ROOT)}` ({doc['device_info']['backend']}, MLX {doc['mlx_version']}, "
             f"runs in A B B A order)", "",
             "| workload | policy | decode tokens/s | vs mlx-lm `KVCache` | peak / steady | decode peak / steady |",
             "|---|---|---:|---:|---:|---:|"]
    for row in doc["rows"]:
        if row["policy"] in ("mlx-lm KVCache", "step", "prealloc", "full", "lowpeak"):
            lines.append(f"| {row['workload']} | {row['policy']} | {row['decode_tokens_per_s']:.1f} | "
                         f"{row['tps_vs_mlx_lm']:.3f} | {row['peak_over_steady']:.3f} | {row['decode_peak_over_steady']:.3f} |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "findings.md"))
    args = parser.parse_args()
    lines = ["# Findings: what KV-cache growth costs on each MLX backend", "",
             "Generated by `python docs/tools/findings.py` from the shipped measurements; every number below is "
             "computed from them. How the runs were made: `docs/calibration.md` (reference workload, "
             "`kvsim calibrate`) and `docs/policies.md` (`docs/tools/bench_policies.py`).", ""]
    answers: list[str] = []
    sections: list[str] = []
    for backend in BACKENDS:
        for path in sorted((ROOT / "data" / "calibration").glob(f"{backend}-*.jsonl")):
            sections += backend_section(backend, path, answers)
    lines += ["## Answers", "", *answers,
              "- **Each policy's transient** is in the per-backend tables: `prealloc` and `full` stay at the "
              "steady cache in decode (their cost is holding the whole context from the start); `lowpeak` grows "
              "one buffer at a time, so its decode transient shrinks with the layer count (1 + 1/(2·layers) for "
              "the cache); `geometric` is flat between its rare doublings, where one doubling of a small model "
              "can reach several times the steady cache.",
              *(bench_answer(p) for p in sorted((ROOT / "data" / "bench").glob("*-mlx*-????????.json"))),
              "", *sections]
    lines += ["## Does pre-allocation slow decode?", "",
              "The review of mlx-lm PR #1038 said a large pre-allocated array reads slower. Side by side in one "
              "run (`prealloc` and `full` hold the whole context from the first step; `step` is the same code as "
              "mlx-lm's `KVCache`, so its ratio shows the run-to-run noise):", ""]
    for path in sorted((ROOT / "data" / "bench").glob("*-mlx*-????????.json")):
        lines += bench_section(path)
    text = "\n".join(lines) + "\n"
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.out)), suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, args.out)
    print(text)


if __name__ == "__main__":
    main()
