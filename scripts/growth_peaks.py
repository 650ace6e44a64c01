"""Measure growth-step peaks on real MLX and compare them with the two closed forms and kvsim.

For each scenario (mlx-lm ``KVCache``, step 256, the contract's reference workload), every decode step
that grows the cache is one row: the measured step peak, the steady cache before it, and

- ``N·new + old`` (the review of mlx-lm PR #1038: old buffers freed as we go): all new buffers plus one
  layer's old ones, on top of nothing else;
- ``N·(new + old)`` (the PR: every layer's old and new buffers live at once);

where, per layer and for K and V together, ``old`` is the buffer before the growth and ``new`` the
concatenated buffer after it. Usage: ``python scripts/growth_peaks.py [--out docs/growth-peaks.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from kvsim.api import simulate
from kvsim.measure import device_info, run_reference
from kvsim.scenario import parse_scenario

SHAPES = [(4, 8, 128, "float16"), (8, 8, 128, "bfloat16"), (12, 8, 128, "float16"), (16, 4, 128, "float16"),
          (24, 8, 64, "bfloat16"), (32, 8, 128, "bfloat16"), (48, 2, 128, "float16"), (32, 1, 512, "float16")]


def rows_for(n_layers: int, heads: int, dim: int, dtype: str) -> list[dict]:
    out = []
    obj = {
        "id": f"L{n_layers}-H{heads}-D{dim}-{dtype}",
        "model": {"n_layers": n_layers, "kv_heads": heads, "head_dim": dim, "dtype": dtype},
        "policy": {"name": "step", "step": 256},
        "workload": {"prompt_tokens": 1000, "prefill_chunk": 512, "decode_tokens": 1100, "batch": 1},
    }
    scenario = parse_scenario(obj)
    measured = run_reference(scenario)
    sim = {}
    for run in simulate(scenario, record_events=False).timeline:
        for i, _ in run.steps():
            sim[i] = run.peak_bytes
    row_bytes = heads * dim * (4 if dtype == "float32" else 2)
    tokens = 0
    for i, step in enumerate(measured.steps):
        before = measured.steps[i - 1].active_bytes if i else 0
        if i > 1 and step.tokens == 1 and step.active_bytes > before:  # a decode growth step
            old_rows = tokens  # aligned: capacity == offset when a decode step grows
            old = 2 * old_rows * row_bytes
            new = 2 * (old_rows + 256) * row_bytes
            out.append({
                "scenario": obj["id"], "step": i, "tokens": tokens, "steady_bytes": before,
                "measured_peak_bytes": step.peak_bytes, "sim_peak_bytes": sim[i],
                "form_n_new_plus_old": n_layers * new + old, "form_n_new_plus_n_old": n_layers * (new + old),
            })
        tokens += step.tokens
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/growth-peaks.json")
    args = parser.parse_args()
    rows = [r for shape in SHAPES for r in rows_for(*shape)]

    def err(key: str) -> list[float]:
        return [abs(r[key] - r["measured_peak_bytes"]) / r["measured_peak_bytes"] * 100 for r in rows]

    print(f"{'scenario':24} {'tokens':>6} {'steady MiB':>10} {'peak MiB':>9} {'peak/steady':>11} "
          f"{'N·new+old':>10} {'N·(new+old)':>11} {'kvsim':>7}")
    for r in rows:
        m = r["measured_peak_bytes"]
        print(f"{r['scenario']:24} {r['tokens']:>6} {r['steady_bytes'] / 2**20:>10.1f} {m / 2**20:>9.1f} "
              f"{m / r['steady_bytes']:>11.3f} {100 * (r['form_n_new_plus_old'] - m) / m:>+9.1f}% "
              f"{100 * (r['form_n_new_plus_n_old'] - m) / m:>+10.1f}% {100 * (r['sim_peak_bytes'] - m) / m:>+6.2f}%")
    summary = {k: {"median_abs_err_pct": statistics.median(err(k)), "max_abs_err_pct": max(err(k))}
               for k in ("form_n_new_plus_old", "form_n_new_plus_n_old", "sim_peak_bytes")}
    print(json.dumps(summary, indent=2))
    doc = {"device": device_info(), "rows": rows, "summary": summary}
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.out)), suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
