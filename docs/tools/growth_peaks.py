"""Measure growth-step peaks on real MLX and compare them with the two closed forms and kvsim.

For each scenario (mlx-lm ``KVCache``, step 256, the contract's reference workload), every decode step
that grows the cache is one row: the measured step peak, the steady cache before it, and

- ``N·new + old`` (the review of mlx-lm PR #1038: old buffers freed as we go): all new buffers plus one
  layer's old ones, on top of nothing else;
- ``N·(new + old)`` (the PR: every layer's old and new buffers live at once);

where, per layer and for K and V together, ``old`` is the buffer before the growth and ``new`` the
concatenated buffer after it. Usage: ``python docs/tools/growth_peaks.py [--out docs/growth-peaks.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from kvsim.api import simulate
from kvsim.calibration.measure import device_info, run_reference
from kvsim.scenario.parse import parse_scenario
from kvsim.scenario.spec import DTYPE_BYTES
from kvsim.sim.result import step_peaks_bytes

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
    sim = step_peaks_bytes(simulate(scenario, record_events=False).timeline)
    row_bytes = heads * dim * DTYPE_BYTES[dtype]
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


def render_markdown(doc: dict) -> str:
    """docs/growth-peaks.md from the measurement document."""
    rows, dev, s = doc["rows"], doc["device"], doc["summary"]
    table = ["| scenario (layers-heads-dims-dtype) | tokens | steady MiB | measured peak MiB | peak/steady | "
             "N·new+old | N·(new+old) | kvsim |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["tokens"] not in (1024, 2048):
            continue
        m = r["measured_peak_bytes"]

        def err(key: str, r: dict = r, m: int = m) -> str:
            return f"{100 * (r[key] - m) / m:+.1f}%"

        table.append(f"| {r['scenario']} | {r['tokens']} | {r['steady_bytes'] / 2**20:.1f} | {m / 2**20:.1f} | "
                     f"{m / r['steady_bytes']:.2f} | {err('form_n_new_plus_old')} | {err('form_n_new_plus_n_old')} | "
                     f"{err('sim_peak_bytes')} |")
    ratios = [r["measured_peak_bytes"] / r["steady_bytes"] for r in rows]
    summary = ["| predictor | median abs. error | max abs. error |", "|---|---:|---:|"]
    for key, label in (("form_n_new_plus_old", "`N·new + old`"), ("form_n_new_plus_n_old", "`N·(new + old)`"),
                       ("sim_peak_bytes", "kvsim (`mlx-cpu` profile)")):
        summary.append(f"| {label} | {s[key]['median_abs_err_pct']:.2f}% | {s[key]['max_abs_err_pct']:.2f}% |")
    return f"""# What a growth step really costs

mlx-lm's `KVCache` grows by concatenating 256 zero rows to every layer's K and V. mlx-lm PR #1038 said both old
and new buffers are live during the concatenation, so a growth step costs `N·(new + old)`; the review answered that
old buffers are freed as they go, so it costs `N·new + old`. We measured it.

**How.** `python docs/tools/growth_peaks.py` runs the contract's reference workload (`kvsim.calibration.measure.run_reference`:
`mx.reset_peak_memory()`, one `mx.eval` per step, `mx.synchronize()`, counters read after each step) with mlx-lm
{dev.get('mlx_lm_version')}'s own `KVCache` (step 256) on MLX {dev['mlx_version']}'s CPU backend ({dev['os']},
{dev['machine']}), for 8 model shapes (4 to 48 layers), a 1000-token prompt in 512-token chunks and 1100 decode
tokens. Every decode step that grows the cache is one row ({len(rows)} rows; all of them in
`docs/growth-peaks.json`). Per layer, K and V together, `old` is the buffer before the growth and `new` the
concatenated buffer after it; "steady" is the active memory before the step. The table shows the growths at 1024
and 2048 tokens; errors are (prediction − measured) / measured. The CUDA counterpart, from the H200 calibration
runs, is in `docs/findings.md`.

{chr(10).join(table)}

Over all {len(rows)} growth steps (measured peak / steady {min(ratios):.2f}–{max(ratios):.2f}):

{chr(10).join(summary)}

## Why neither closed form works

- **Small models peak above both forms.** With 4–8 layers the whole step graph (about 20 ops per layer) fits inside
  what the host may dispatch ahead of the CPU worker (10 tasks of 10 dispatches), so nothing is freed before every
  layer's zeros, concatenation and old buffer are allocated: the peak is `N·(old + 2·ext)`, where `ext` is the
  256-row extension, i.e. `N·(new + old)` plus the zeros, up to 2.5× the steady cache. `N·new + old` is 40–45% low.
- **Large models peak between the two.** With 24–48 layers the host is throttled: MLX's `eval_impl` waits while more
  than 10 tasks are in flight, and each completed task frees the old buffers it held. But the tape is built
  breadth-first with a width limit of 20 (`MLX_BFS_MAX_WIDTH`), so many layers' zeros and concatenations are
  dispatched before the first old buffer is released: `N·new + old` is about 16–27% low and `N·(new + old)` 27–56%
  high, and each form's error depends on the layer count and the cache size.
- **The maintainer is right about the mechanism, the PR about the magnitude on small models.** Old buffers are
  freed as they go (`detach()` after dispatch, release when the task holding them completes), but "as they go" lags
  by up to about 110 dispatches and by the BFS order, not by one layer.

kvsim reproduces these peaks because it replays what MLX does: the graph each step builds (`kvsim/graph.py`,
`kvsim/layer_ops.py`), MLX's own tape order (`kvsim/tape.py`), the allocator and buffer cache
(`kvsim/allocator.py`), and the host/worker event timing with the 10-task throttle (`kvsim/eval_sim.py`).

**Where runs differ.** These runs were made on a quiet machine. When the host thread is descheduled (other jobs on
the cores), the CPU worker can finish tasks before the host dispatches the next op, and a growth step's peak comes
out lower, by up to 13% in the calibration runs (`docs/findings.md`). The simulator plays the host running ahead,
the usual case, so it predicts the upper end of what a disturbed run shows.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/growth-peaks.json")
    parser.add_argument("--doc", default="docs/growth-peaks.md", help="the markdown page to write")
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
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.doc)), suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(render_markdown(doc))
    os.replace(tmp, args.doc)


if __name__ == "__main__":
    main()
