"""Reading the CUPTI traces ``docs/tools/device/cold_trace.c`` writes, as the device scripts archive them
(``trace-NAME.txt`` beside ``timing-NAME.jsonl`` in a ``.tar.xz``): shared by the tests that read them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from doc_tools import load_tool

device_times = load_tool(Path("device_times.py"))
"""``docs/tools/device_times.py``, whose reader of ``cold_trace.c``'s records this one shares."""


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
    timing, calls, device = device_times.read_records(archive, name)
    launches = tuple((a, b, *device[c]) for api, a, b, c in calls if api == "cuGraphLaunch" and c in device)
    instantiations = tuple((a, b) for api, a, b, _ in calls if api == "cuGraphInstantiateWithFlags")
    return Trace(tuple(r for r in timing if "run" in r), launches, instantiations)
