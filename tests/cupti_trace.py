"""Reading the CUPTI traces ``docs/tools/device/cold_trace.c`` writes, as the device scripts archive them
(``trace-NAME.txt`` beside ``timing-NAME.jsonl`` in a ``.tar.xz``): shared by the tests that read them."""

from __future__ import annotations

import json
import lzma
import tarfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Trace:
    """One process's trace: its timed passes or chunks, and its graph launches and instantiations (s)."""

    timing: tuple[dict, ...]
    """``chunk_timing.py``'s rows (each with ``encode_start_s`` and ``done_s``, on the trace's clock)."""
    launches: tuple[tuple[float, float, float, float], ...]
    """Per ``cuGraphLaunch`` the device ran: (entered, returned, device start, device end)."""
    instantiations: tuple[tuple[float, float], ...]
    """Per ``cuGraphInstantiateWithFlags``: (entered, returned)."""

    def within(self, row: dict) -> tuple[tuple[tuple[float, float, float, float], ...], tuple[tuple[float, float], ...]]:
        """The launches and instantiations entered during ``row``'s encoding and device work."""
        start, done = row["encode_start_s"], row["done_s"]
        return (tuple(x for x in self.launches if start <= x[0] <= done),
                tuple(x for x in self.instantiations if start <= x[0] <= done))


def read_trace(archive: Path, name: str) -> Trace:
    with tarfile.open(fileobj=lzma.open(archive)) as tar:
        timing = [json.loads(x) for x in tar.extractfile(f"timing-{name}.jsonl").read().decode().splitlines()]
        lines = tar.extractfile(f"trace-{name}.txt").read().decode().splitlines()
    device, launches, instantiations, enter, corr = {}, [], [], {}, None
    for line in lines:  # cold_trace.c's format: times in ns of CLOCK_MONOTONIC, time.perf_counter()'s clock
        p = line.split()
        if p[0] == "G":
            device[int(p[1])] = (int(p[2]) / 1e9, int(p[3]) / 1e9)
        elif p[0] == "C" and p[2] == "cuGraphLaunch":
            corr = int(p[1])
        elif p[0] == "A" and p[1] == "E":
            enter[p[3]] = int(p[4]) / 1e9
        elif p[0] == "A" and p[3] == "cuGraphLaunch":
            launches.append((corr, enter[p[3]], int(p[4]) / 1e9))
        elif p[0] == "A" and p[3] == "cuGraphInstantiateWithFlags":
            instantiations.append((enter[p[3]], int(p[4]) / 1e9))
    ran = tuple((a, b, *device[c]) for c, a, b in launches if c in device)  # the device's records follow the calls
    return Trace(tuple(r for r in timing if "run" in r), ran, tuple(instantiations))
