"""Late completion handlers on CUDA: how often a run's step peaks above the model's latest timing,
whether a stalled handler explains it, and whether a per-step stall probability helps the point.

For every CUDA scenario in the data, the model's per-step peaks under the latest free timing
(``profile.variant("high")``) and under a stall (that timing with ``--stall-lag-s`` of completion
lag) are set beside each run's measured step peaks. An *event* is a step a run peaks more than 5%
(and 0.5 MiB) above the latest timing. The expected-maximum term gives each step a probability
``q`` of its stall peak (prefill steps; decode steps take ``q / 20``) and adds the expected rise of
the run's maximum to the point prediction; it is scored on the train split as ``kvsim fit`` scores
peaks (mean + half max |error|).

Usage: ``python docs/tools/late_handlers.py [DATA_DIR ...] [--stall-lag-s 0.002]`` (default: every
``data/*`` directory with CUDA files). Takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from kvsim.scenario.parse import Scenario, parse_scenario
from kvsim.sim.engine import simulate_timeline
from kvsim.sim.peak_range import point_estimate
from kvsim.sim.profile import BackendProfile, load_profile
from kvsim.sim.result import step_peaks_bytes

MIB = 2**20
EVENT_SHARE, EVENT_MIN_BYTES = 0.05, MIB // 2
Q_GRID = (0.0, 0.005, 0.01, 0.02, 0.03)


@dataclass(frozen=True)
class Case:
    sid: str
    split: str
    tokens: list[int]  # per step
    runs_peaks: list[list[int]]  # per run, per step
    early: dict[int, int]
    fitted: dict[int, int]
    late: dict[int, int]
    stall: dict[int, int]


def step_peaks(scenario: Scenario, profile: BackendProfile) -> dict[int, int]:
    return step_peaks_bytes(simulate_timeline(scenario, profile, record_events=False).timeline)


def load_cases(dirs: list[Path], profile: BackendProfile, stall_lag_s: float) -> list[Case]:
    variants = {"early": profile.variant("low"), "fitted": profile, "late": profile.variant("high"),
                "stall": replace(profile.variant("high"), completion_lag_s=stall_lag_s)}
    cases = []
    for path in sorted(p for d in dirs for p in d.glob("mlx-cuda-*.jsonl")):
        runs: dict[str, list[dict]] = {}
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("kind") == "measurement":
                runs.setdefault(rec["id"], []).append(rec)
        for sid, recs in runs.items():
            scenario = parse_scenario(recs[0]["scenario"], backend="mlx-cuda")
            sims = {k: step_peaks(scenario, p) for k, p in variants.items()}
            cases.append(Case(sid, recs[0]["split"], recs[0]["steps"]["tokens"],
                              [r["steps"]["peak_bytes"] for r in recs], **sims))
    return cases


def expected_max(base: list[int], hit: list[int], q: list[float]) -> float:
    """E[max_i X_i] for independent X_i = hit_i with probability q_i, else base_i."""
    floor = max(base)
    cands = sorted(((h, p) for h, p in zip(hit, q) if h > floor and p > 0), reverse=True)
    value, none_yet = float(floor), 1.0
    for k, (h, p) in enumerate(cands):
        none_yet *= 1 - p
        value += (1 - none_yet) * (h - (cands[k + 1][0] if k + 1 < len(cands) else floor))
    return value


def point_errors_pct(cases: list[Case], q_prefill: float, weight: float) -> dict[str, list[float]]:
    errs: dict[str, list[float]] = {}
    for c in cases:
        steps = sorted(c.late)
        base = [c.late[i] for i in steps]
        hit = [max(c.stall[i], c.late[i]) for i in steps]
        q = [q_prefill if c.tokens[i] > 1 else q_prefill / 20 for i in steps]
        rise = expected_max(base, hit, q) - max(base)
        point = point_estimate(max(c.fitted.values()), max(c.early.values()), max(c.late.values()), weight) + rise
        mean = statistics.fmean(max(run) for run in c.runs_peaks)
        errs.setdefault(c.split, []).append(100 * (point - mean) / mean)
    return errs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path)
    ap.add_argument("--stall-lag-s", type=float, default=0.002)
    args = ap.parse_args()
    dirs = args.dirs or sorted(p for p in Path("data").iterdir() if p.is_dir() and any(p.glob("mlx-cuda-*.jsonl")))
    profile = load_profile("mlx-cuda")
    cases = load_cases(dirs, profile, args.stall_lag_s)
    counts = {(kind, split): [0, 0] for kind in ("prefill", "decode") for split in ("train", "validation")}
    events = explained = 0
    for c in cases:
        for run in c.runs_peaks:
            for i, peak in enumerate(run):
                if i not in c.late:
                    continue
                late, stall = c.late[i], max(c.stall[i], c.late[i])
                rise = peak - late
                if rise > EVENT_SHARE * late and rise > EVENT_MIN_BYTES:
                    events += 1
                    explained += rise <= 1.05 * (stall - late) + 0.01 * late
                if stall - late >= 0.1 * late and stall - late > EVENT_MIN_BYTES:  # a step a stall can lift
                    cell = counts["prefill" if c.tokens[i] > 1 else "decode", c.split]
                    cell[0] += rise > (stall - late) / 2
                    cell[1] += 1
    runs = sum(len(c.runs_peaks) for c in cases)
    print(f"MLX {profile.mlx_version}; {len(cases)} scenarios, {runs} runs from {len(dirs)} directories; "
          f"stall = latest timing + {args.stall_lag_s * 1e3:g} ms lag")
    print(f"events (a step > {EVENT_SHARE:.0%} above the latest timing): {events}; "
          f"within the stall's rise: {explained} ({100 * explained / max(events, 1):.1f}%)")
    print("\nsteps a stall lifts >= 10%: runs that rose over half of it")
    for (kind, split), (hit, n) in counts.items():
        print(f"  {kind:8s} {split:10s} {hit:5d} / {n:6d} = {100 * hit / max(n, 1):5.2f}%")
    print("\nexpected-maximum term, train split (loss = mean + max/2 of |point error| %):")
    for q in Q_GRID:
        errs = point_errors_pct(cases, q, profile.peak_point_weight)
        train = [abs(e) for e in errs.get("train", [])]
        val = [abs(e) for e in errs.get("validation", [])]
        print(f"  q {q:5.3f}: train mean {statistics.fmean(train):5.2f} max {max(train):6.2f} "
              f"loss {statistics.fmean(train) + max(train) / 2:5.2f} | validation max {max(val):6.2f}")


if __name__ == "__main__":
    main()
