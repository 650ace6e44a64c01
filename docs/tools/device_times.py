"""Per prompt chunk of a CUPTI chunk trace (``docs/tools/device/chunk_trace.sh``'s archives): how long the host took
to encode it, how long the device ran its command buffers, and how many ran at once.

Reads ``cold_trace.c``'s records as ``tests/cupti_trace.py`` does, plus the driver calls' own times: per chunk, the
host's span from ``mx.eval`` to its last ``cuGraphLaunch``, the wait before the first, the device's busy time (the
sum of its graphs' runs), the most graphs in flight at any launch, and the ``cuMemAllocAsync`` calls the host made
on the way (count and seconds) (``docs/generation.md``, "CUDA: the device's and the host's times per command buffer,
traced").

    python docs/tools/device_times.py data/generation/mlx-cuda-0.32.4/kernels/chunk-trace.tar.xz q4 llama8
    python docs/tools/device_times.py data/generation/mlx-cuda-0.32.4/kernels/device-time-trace.tar.xz --warm
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ChunkTimes:
    """One traced chunk's times (seconds) and counts."""

    name: str
    run: int  # 0: the process's cold pass; 1: the same chunks again, warm
    offset: int  # tokens before the chunk
    peak_above_bytes: int  # its peak above the memory held before it (chunk_timing.py)
    launches: int  # cuGraphLaunch calls the device ran
    instantiations: int  # cuGraphInstantiateWithFlags calls
    host_s: float  # mx.eval to the last launch's call
    first_launch_s: float  # mx.eval to the first launch's call
    device_busy_s: float  # the sum of the launched graphs' device times
    depth: int  # the most graphs in flight at a launch (its own included)
    alloc_calls: int  # cuMemAllocAsync calls up to the last launch
    alloc_s: float  # their time on the host


Call = tuple[str, float, float, "int | None"]
"""A driver call the trace recorded: (API, entered, returned, the correlation of a ``cuGraphLaunch``; else None), s."""


def read_records(archive: Path, name: str) -> tuple[list[dict], list[Call], dict[int, tuple[float, float]]]:
    """Trace ``name`` in ``archive``: ``chunk_timing.py``'s rows, the driver calls in order, and each launched graph's
    device (start, end) by its launch's correlation (``tests/cupti_trace.py`` reads the same)."""
    with tarfile.open(fileobj=lzma.open(archive)) as tar:
        timing = [json.loads(x) for x in tar.extractfile(f"timing-{name}.jsonl").read().decode().splitlines()]
        lines = tar.extractfile(f"trace-{name}.txt").read().decode().splitlines()
    calls, device, enter, corr = [], {}, {}, None  # calls: (api, entered, returned, correlation of a launch)
    for line in lines:  # cold_trace.c: times in ns of CLOCK_MONOTONIC, time.perf_counter()'s clock
        p = line.split()
        if len(p) < {"A": 5, "G": 4, "C": 3}.get(p[0] if p else "", 1):  # a killed process's last line is short
            continue
        if p[0] == "G":
            device[int(p[1])] = (int(p[2]) / 1e9, int(p[3]) / 1e9)
        elif p[0] == "C" and p[2] == "cuGraphLaunch":
            corr = int(p[1])
        elif p[0] == "A" and p[1] == "E":
            enter[p[3]] = int(p[4]) / 1e9
        elif p[0] == "A" and p[1] == "X":
            calls.append((p[3], enter[p[3]], int(p[4]) / 1e9, corr if p[3] == "cuGraphLaunch" else None))
    return timing, calls, device


def read_chunks(archive: Path, name: str) -> list[ChunkTimes]:
    """Every timed chunk of trace ``name`` in ``archive``."""
    timing, calls, device = read_records(archive, name)
    return [c for t in timing if "run" in t and (c := _chunk(name, t, calls, device)) is not None]


def _chunk(name: str, t: dict, calls: list, device: dict) -> ChunkTimes | None:
    start, done = t["encode_start_s"], t["done_s"]
    mine = [c for c in calls if start <= c[1] <= done]
    launches = [(c[1], *device[c[3]]) for c in mine if c[0] == "cuGraphLaunch" and c[3] in device]
    if not launches:
        return None
    last = launches[-1][0]
    allocs = [c for c in mine if c[0] == "cuMemAllocAsync" and c[1] <= last]
    depth = max(sum(1 for s, _, end in launches if s <= x[0] < end) for x in launches)
    return ChunkTimes(name, t["run"], t["offset"], t["peak_above_bytes"], len(launches),
                      sum(1 for c in mine if c[0] == "cuGraphInstantiateWithFlags"), last - start,
                      launches[0][0] - start, sum(b - a for _, a, b in launches), depth, len(allocs),
                      sum(b - a for _, a, b, _ in allocs))


def names_in(archive: Path) -> list[str]:
    with tarfile.open(fileobj=lzma.open(archive)) as tar:
        return sorted(m.name[6:-4] for m in tar.getmembers() if m.name.startswith("trace-"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archive", type=Path)
    ap.add_argument("names", nargs="*", help="traces to read (default: every one in the archive)")
    ap.add_argument("--warm", action="store_true", help="only the warm pass's later chunks")
    args = ap.parse_args(argv)
    if not args.archive.is_file():
        print(f"device_times: archive {str(args.archive)!r} not found", file=sys.stderr)
        return 2
    known = names_in(args.archive)
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"device_times: no trace {unknown[0]!r} in {args.archive.name} (it has {', '.join(known)})",
              file=sys.stderr)
        return 2
    for name in args.names or known:
        for c in read_chunks(args.archive, name):
            if args.warm and (c.run != 1 or c.offset == 0):
                continue
            print(f"{c.name:8s} pass {c.run} offset {c.offset:6d}: peak {c.peak_above_bytes / 1e9:5.2f} GB, "
                  f"{c.launches:2d} graphs ({c.instantiations:2d} instantiated), host {c.host_s * 1e3:7.1f} ms "
                  f"(first launch {c.first_launch_s * 1e3:6.1f}), device {c.device_busy_s * 1e3:6.1f} ms, "
                  f"{c.depth:2d} in flight, {c.alloc_calls} allocations {c.alloc_s * 1e3:5.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
