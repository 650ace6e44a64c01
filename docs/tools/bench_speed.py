"""Simulator speed, side by side: this tree against the release at 59093ae, and fast against exact.

One run measures both engines on this machine, each in its own subprocess started the same way
(the old one with ``PYTHONPATH`` on a ``git worktree`` of 59093ae that the script makes), and prints:

- **speed**: the DS4 (DeepSeek-V4-Flash, ``geometric``) 1,000,000-token decode, ``kvsim predict`` of 100
  such scenarios (wall, imports included; identical ones, which a memo answers, and ones of 100 distinct
  lengths, the honest reading), time against tokens; the old/new ratio of each, in wall seconds and in
  CPU seconds (``time.process_time`` in the worker, the children's ``getrusage`` for ``kvsim predict``:
  the host may be shared, and CPU seconds are what a busy host does not inflate much);
- **scaling**: 10M tokens against 10K tokens (llama-3.1-8b ``step`` 256 and DS4 ``geometric``), new engine;
- **agreement**: the fast engine against the op-by-op reference (``simulate(exact=True)``): relative error
  of peak, final active, peak low and high, over every shipped calibration scenario
  (``kvsim.calibration.sweep``) and step and geometric sweeps of llama-3.1-8b and DS4 up to 1M tokens.

Targets (issue #19): DS4 1M decode and 100 distinct predictions each >= 10x faster than 59093ae in CPU seconds;
10M tokens at most 2x the CPU cost of 10K; every error <= 0.1 %. A timed case is cold: ``kvsim.sim.memo.clear()``
forgets results, step results (``kvsim.sim.step_cache``) and evaluation plans before each repeat. Usage: ``python docs/tools/bench_speed.py [--repeats 5] [--quick]
[--json OUT]``; exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BASE_COMMIT = "59093ae"
ROOT = Path(__file__).resolve().parents[2]
DS4 = {"preset": "deepseek-v4-flash"}
LLAMA = {"preset": "llama-3.1-8b"}
GEOMETRIC = {"name": "geometric", "seed_rows": 4096, "cap": "context", "slack_rows": 2}
STEP256 = {"name": "step", "step": 256}
TARGET_RATIO, TARGET_SCALING, TARGET_ERROR = 10.0, 2.0, 1e-3
ROUNDS = 2  # worker runs per side, taking turns


def scenario(decode_tokens: int, policy: dict, model: dict = DS4, sid: str = "s", prompt_tokens: int = 2048) -> dict:
    return {"id": sid, "model": model, "policy": policy,
            "workload": {"prompt_tokens": prompt_tokens, "prefill_chunk": 2048, "decode_tokens": decode_tokens}}


# ---- the worker: runs under either tree (PYTHONPATH picks which) ---------------------------------
TIMED = {  # case -> scenario; each timed cold (a fresh simulation per repeat)
    "ds4-geometric-10k": scenario(10_000, GEOMETRIC),
    "ds4-geometric-1m": scenario(1_000_000, GEOMETRIC),
    "ds4-geometric-10m": scenario(10_000_000, GEOMETRIC),
    "llama-step256-10k": scenario(10_000, STEP256, LLAMA),
    "llama-step256-128k": scenario(131_072, STEP256, LLAMA),
    "llama-step256-1m": scenario(1_000_000, STEP256, LLAMA),
    "llama-step256-10m": scenario(10_000_000, STEP256, LLAMA),
}
OLD_CASES = ("ds4-geometric-10k", "ds4-geometric-1m", "ds4-geometric-10m", "llama-step256-10k", "llama-step256-128k")


def _parse(obj: dict) -> Any:
    try:
        from kvsim.scenario.parse import parse_scenario
    except ImportError:  # 59093ae: one module
        from kvsim.scenario import parse_scenario
    return parse_scenario(obj)


def _forget() -> None:
    """Drop any memo a previous repeat left, so every repeat is cold."""
    try:
        from kvsim.sim.memo import clear
    except ImportError:
        return
    clear()


def worker(cases: list[str], repeats: int) -> dict[str, list[list[float]]]:
    """[wall, CPU] seconds of each cold simulation (the memo cleared), cases in turn, after one untimed warm-up each."""
    from kvsim.api import simulate

    parsed = {case: _parse(TIMED[case]) for case in cases}
    times: dict[str, list[list[float]]] = {case: [] for case in cases}
    for case in cases:  # imports and one-time loads out of the way
        simulate(parsed[case], record_events=False)
    for _ in range(repeats):  # cases take turns
        for case in cases:
            _forget()
            t0, c0 = time.perf_counter(), time.process_time()
            simulate(parsed[case], record_events=False)
            times[case].append([time.perf_counter() - t0, time.process_time() - c0])
    return times


# ---- the driver ------------------------------------------------------------------------------------
def base_tree() -> Path:
    """A git worktree of 59093ae (made once, kept in the temp folder)."""
    path = Path(tempfile.gettempdir()) / f"kvsim-bench-{BASE_COMMIT}"
    if not (path / "kvsim" / "api.py").exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), BASE_COMMIT],
                       check=True, capture_output=True)
    return path


def run_tree(tree: Path, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, input=stdin,
                          check=False)


def timed_cases(tree: Path, cases: list[str], repeats: int) -> dict[str, list[list[float]]]:
    done = run_tree(tree, [str(Path(__file__).resolve()), "--worker", *cases, "--repeats", str(repeats)])
    if done.returncode:
        raise RuntimeError(f"worker in {tree} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.splitlines()[-1])


def predict_s(tree: Path, objs: list[dict]) -> tuple[float, float, int]:
    """Wall and CPU seconds (its worker processes included) of ``kvsim predict`` on ``objs``, imports included,
    and the lines it printed."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(objs, fh)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = run_tree(tree, ["-m", "kvsim.cli", "predict", fh.name])
    wall_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    os.unlink(fh.name)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall_s, cpu_s, len(done.stdout.splitlines()) if done.returncode == 0 else -1


def speed(repeats: int, quick: bool) -> tuple[list[dict], bool]:
    """Rows of wall seconds (median) and CPU seconds (best) per case, old and new, with their ratios."""
    old_tree, new_tree = base_tree(), ROOT
    old_cases = ["ds4-geometric-1m"] if quick else list(OLD_CASES)
    new_cases = old_cases + ([] if quick else [c for c in TIMED if c not in OLD_CASES])
    runs: dict[str, dict[str, list[list[float]]]] = {"new": {}, "old": {}}
    for _ in range(ROUNDS):  # old and new take turns, so a change in the host's load hits both
        for side, tree, cases in (("new", new_tree, new_cases), ("old", old_tree, old_cases)):
            for case, samples in timed_cases(tree, cases, repeats).items():
                runs[side].setdefault(case, []).extend(samples)
    wall = {side: {c: statistics.median(w for w, _ in v) for c, v in runs[side].items()} for side in runs}
    cpu = {side: {c: min(u for _, u in v) for c, v in runs[side].items()} for side in runs}
    rows = [{"case": c, "old_s": wall["old"].get(c), "new_s": wall["new"][c], "old_cpu_s": cpu["old"].get(c),
             "new_cpu_s": cpu["new"][c]} for c in new_cases]
    hundred = [scenario(1_000_000, GEOMETRIC, sid=f"s{i}") for i in range(100)]
    distinct = [scenario(1_000_000 + 1000 * i, GEOMETRIC, sid=f"s{i}") for i in range(100)]
    for name, objs in (("predict-100-ds4-1m", hundred), ("predict-100-ds4-distinct", distinct)):
        new_s, new_cpu_s, new_lines = predict_s(new_tree, objs)
        old_s, old_cpu_s, old_lines = predict_s(old_tree, objs)
        ok_lines = new_lines == old_lines == 100
        rows.append({"case": name, "old_s": old_s, "new_s": new_s if ok_lines else None, "old_cpu_s": old_cpu_s,
                     "new_cpu_s": new_cpu_s if ok_lines else None})
    for row in rows:
        row["ratio"] = row["old_s"] / row["new_s"] if row["old_s"] and row["new_s"] else None
        row["cpu_ratio"] = row["old_cpu_s"] / row["new_cpu_s"] if row["old_cpu_s"] and row["new_cpu_s"] else None
    ok = all((rows_by(rows, c)["cpu_ratio"] or 0) >= TARGET_RATIO for c in ("ds4-geometric-1m", "predict-100-ds4-distinct"))
    if not quick:
        for model in ("llama-step256", "ds4-geometric"):
            scaling = cpu["new"][f"{model}-10m"] / cpu["new"][f"{model}-10k"]
            print(f"{model}: 10M tokens cost {scaling:.2f}x 10K tokens in CPU seconds (target <= {TARGET_SCALING:g}x)")
            ok &= scaling <= TARGET_SCALING
    return rows, ok


def rows_by(rows: list[dict], case: str) -> dict:
    return next(r for r in rows if r["case"] == case)


# ---- fast against exact ----------------------------------------------------------------------------
FIELDS = ("peak_bytes", "final_active_bytes", "peak_low_bytes", "peak_high_bytes")


def sweep_scenarios(quick: bool) -> list[Any]:
    """Every shipped calibration scenario, then step and geometric sweeps of llama-3.1-8b and DS4."""
    from kvsim.calibration.sweep import SWEEPS, build_sweep
    from kvsim.scenario.parse import parse_scenario

    out = [item.scenario for name in (["default"] if quick else SWEEPS) for item in build_sweep(name)]
    tokens = (8192, 131_072) if quick else (8192, 131_072, 1_000_000)
    for model, tag in ((LLAMA, "llama"), (DS4, "ds4")):
        for n in tokens:
            for step in (256, 1024, 4096):
                out.append(parse_scenario(scenario(n, {"name": "step", "step": step}, model, f"{tag}-step{step}-{n}")))
            for seed in (1024, 4096):
                pol = {"name": "geometric", "seed_rows": seed, "cap": "context"}
                out.append(parse_scenario(scenario(n, pol, model, f"{tag}-geo{seed}-{n}")))
    return out


def agreement(quick: bool) -> tuple[list[dict], bool]:
    from kvsim.api import simulate

    rows = []
    for sc in sweep_scenarios(quick):
        t0 = time.perf_counter()
        fast = simulate(sc, record_events=False).to_prediction()
        t1 = time.perf_counter()
        exact = simulate(sc, record_events=False, exact=True).to_prediction()
        t2 = time.perf_counter()
        errors = {f: abs(fast[f] - exact[f]) / max(1, abs(exact[f])) for f in FIELDS}
        rows.append({"id": sc.id, "fast_s": t1 - t0, "exact_s": t2 - t1, **errors})
    ok = all(r[f] <= TARGET_ERROR for r in rows for f in FIELDS)
    return rows, ok


# ---- report ----------------------------------------------------------------------------------------
def _fmt_s(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:9.1f} ms" if s < 10 else f"{s:9.2f} s "


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="the two ratio targets and the default sweep only")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here")
    parser.add_argument("--speed-only", action="store_true", help="skip fast against exact")
    parser.add_argument("--worker", nargs="+", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeats)))
        return 0
    import mlx.core as mx

    print(f"MLX {mx.__version__}; {os.cpu_count()} cores; old = {BASE_COMMIT}, new = this tree")
    rows, speed_ok = speed(args.repeats, args.quick)
    print(f"\n{'case':<28} {'old wall':>12} {'new wall':>12} {'ratio':>7} {'old CPU':>12} {'new CPU':>12} {'ratio':>7}")
    for r in rows:
        ratios = ["-" if x is None else f"{x:.1f}x" for x in (r["ratio"], r["cpu_ratio"])]
        print(f"{r['case']:<28} {_fmt_s(r['old_s']):>12} {_fmt_s(r['new_s']):>12} {ratios[0]:>7} "
              f"{_fmt_s(r['old_cpu_s']):>12} {_fmt_s(r['new_cpu_s']):>12} {ratios[1]:>7}")
    errs, agree_ok = ([], True) if args.speed_only else agreement(args.quick)
    if errs:
        worst = {f: max(errs, key=lambda r: r[f]) for f in FIELDS}
        fast_s, exact_s = sum(r["fast_s"] for r in errs), sum(r["exact_s"] for r in errs)
        differ = sum(any(r[f] for f in FIELDS) for r in errs)
        print(f"\nfast vs exact on {len(errs)} scenarios ({differ} differ at all): fast {fast_s:.1f} s, "
              f"exact {exact_s:.1f} s in all")
        for f, r in worst.items():
            print(f"  worst {f:<20} {r[f] * 100:.4f} %" + (f"  ({r['id']})" if r[f] else ""))
    if args.json:
        doc = {"speed": rows, "agreement": errs}
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, args.json)
    return 0 if speed_ok and agree_ok else 1


if __name__ == "__main__":
    sys.exit(main())
