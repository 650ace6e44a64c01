"""Which loaded CPU growth-step peaks does one host stall reproduce? (docs/validation.md, CPU peaks on a busy host)

For each scenario of a calibration file with a run whose near-peak step peaked below the quiet model, the scenario is
simulated with the host thread stalled before op k of every eval (``BackendProfile.host_stall_op``), for every k of
its longest tape; a measured step peak counts as reproduced when one of those peaks is within 8 bytes of it.

    python docs/tools/cpu_load_stalls.py data/cpu-load/default-busy2 [--limit 8] [--skip step,quant]

Slow: one whole simulation per op of the tape (about a minute per 12-layer scenario on a quiet core).
"""

from __future__ import annotations

import argparse
import collections
from dataclasses import replace

import kvsim.sim.eval_sim as eval_sim
from kvsim.calibration.datafile import load_calibrations
from kvsim.scenario.parse import parse_scenario
from kvsim.sim.engine import simulate_timeline
from kvsim.sim.profile import load_profile
from kvsim.sim.result import step_peaks_bytes

MATCH_BYTES = 8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="+")
    ap.add_argument("--limit", type=int, default=8, help="scenarios to analyse (default 8)")
    ap.add_argument("--skip", default="", help="comma-separated id prefixes to leave out")
    args = ap.parse_args()
    profile = load_profile("mlx-cpu")
    _, records = load_calibrations(args.data, backend="mlx-cpu")
    by_id: dict[str, list[dict]] = collections.defaultdict(list)
    for rec in records:
        by_id[rec["id"]].append(rec)
    skip = tuple(p for p in args.skip.split(",") if p)
    tape = [0]
    order = eval_sim.execution_order

    def counted(*a, **k):  # the longest tape of the scenario's evals
        o = order(*a, **k)
        tape[0] = max(tape[0], len(o))
        return o

    eval_sim.execution_order = counted
    done = hits = total = 0
    for sid, recs in by_id.items():
        if done >= args.limit:
            break
        if skip and sid.startswith(skip):
            continue
        scenario = parse_scenario(recs[0]["scenario"], "mlx-cpu")
        tape[0] = 0
        quiet = step_peaks_bytes(simulate_timeline(scenario, profile, False).timeline)
        top = max(quiet.values())
        off = [(i, p) for r in recs for i, p in enumerate(r["steps"]["peak_bytes"])
               if quiet[i] - p > max(64, 1e-3 * quiet[i]) and quiet[i] >= 0.9 * top]
        if not off:
            continue
        done += 1
        steps = {i for i, _ in off}
        stalled: dict[int, set[int]] = collections.defaultdict(set)
        for k in range(tape[0]):
            peaks = step_peaks_bytes(simulate_timeline(scenario, replace(profile, host_stall_op=k), False).timeline)
            for i in steps:
                stalled[i].add(peaks[i])
        found = sum(min(abs(v - p) for v in stalled[i]) <= MATCH_BYTES for i, p in off)
        hits, total = hits + found, total + len(off)
        lowest = min(min(stalled[i]) / quiet[i] for i in steps)
        print(f"{sid}: tape {tape[0]} ops; {found}/{len(off)} loaded near-peak step peaks reproduced by one stall to "
              f"{MATCH_BYTES} B; lowest stall peak / quiet {lowest:.3f}", flush=True)
    print(f"total {hits}/{total}")


if __name__ == "__main__":
    main()
