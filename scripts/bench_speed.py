"""Simulator speed: the issue's targets, and how time grows with tokens and with growth events.

- one 1,000,000-token decode of the DeepSeek-V4-Flash preset under ``geometric``: <= 50 ms of simulation;
- ``kvsim predict`` of 100 such scenarios: <= 5 s wall (one process, imports included).

Usage: ``python scripts/bench_speed.py [--repeats 5]``. Prints a table; exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from kvsim.api import simulate
from kvsim.scenario.parse import parse_scenario

DS4 = {"preset": "deepseek-v4-flash"}
GEOMETRIC = {"name": "geometric", "seed_rows": 4096, "cap": "context", "slack_rows": 2}


def scenario(decode_tokens: int, policy: dict, model: dict = DS4, sid: str = "s") -> dict:
    return {"id": sid, "model": model, "policy": policy,
            "workload": {"prompt_tokens": 2048, "prefill_chunk": 2048, "decode_tokens": decode_tokens}}


def time_simulate(obj: dict, repeats: int) -> tuple[float, int]:
    parsed = parse_scenario(obj)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = simulate(parsed, record_events=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result.summary.grow_events


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    ok = True
    one_s, grows = time_simulate(scenario(1_000_000, GEOMETRIC), args.repeats)
    ok &= one_s <= 0.050
    print(f"DS4 geometric, 1,000,000-token decode: {one_s * 1e3:.1f} ms ({grows} layer grows)  target <= 50 ms")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump([scenario(1_000_000, GEOMETRIC, sid=f"s{i}") for i in range(100)], fh)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kvsim.cli", "predict", fh.name], capture_output=True, text=True)
    wall_s = time.perf_counter() - t0
    lines = done.stdout.splitlines()
    ok &= wall_s <= 5.0 and done.returncode == 0 and len(lines) == 100
    print(f"kvsim predict, 100 such scenarios: {wall_s:.2f} s wall, {len(lines)} lines  target <= 5 s")

    print("\nTime vs tokens (DS4, geometric):")
    print(f"{'decode tokens':>14} {'ms':>8} {'layer grows':>12}")
    for tokens in (10_000, 100_000, 1_000_000, 4_000_000):
        ms, grows = time_simulate(scenario(tokens, GEOMETRIC), args.repeats)
        print(f"{tokens:>14,} {ms * 1e3:>8.1f} {grows:>12}")
    print("\nTime vs growth events (llama-3.1-8b, 100,000-token decode, step policy):")
    print(f"{'step rows':>10} {'ms':>9} {'layer grows':>12} {'ms per grow step':>17}")
    llama = {"preset": "llama-3.1-8b"}
    for step in (16384, 4096, 1024, 256):
        ms, grows = time_simulate(scenario(100_000, {"name": "step", "step": step}, llama), max(1, args.repeats // 2))
        print(f"{step:>10} {ms * 1e3:>9.1f} {grows:>12} {ms * 1e3 / max(1, grows / 32):>17.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
