"""Step results shared across runs: a step is a pure function of the engine's state, so a step met again
in the same state (another prediction that shares this one's first growths) is installed, not replayed.

What a step reads is the layers' caches (capacity, rows, buffer ids), the live buffers (ids, lengths,
reference counts, labels, the next id), the allocator (active bytes, the cached lengths in LRU order, the
last malloc's fresh bytes), the scheduler (dispatch phase, clocks, frees still pending) and its plan (each
layer's rows and growth); what it writes is the same state, the step's peak and the run's accumulators
(growth events, bytes copied, the allocator's footprint peak). The key holds all of the first (and the
scenario's static parts: layer shapes, buffers, policies' kinds, consumer, chunk, batch, the profile), the
entry all of the second, so a hit leaves the engine exactly as playing the step would have, buffer ids
included. Cleared with ``kvsim.sim.memo.clear()``; ``simulate(exact=True)`` never reads it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass

MAX_ENTRIES = 512  # steps kept (least recently used dropped first); a DS4 1M-token run's entries hold ~40 kB each (tracemalloc)

_entries: OrderedDict[Hashable, StepEntry] = OrderedDict()
_statics: dict[Hashable, int] = {}  # an engine's static part -> a small id (hashed once per engine)


@dataclass(frozen=True, slots=True)
class StepEntry:
    """What one step did: the state after it and the run's accumulators it moved."""

    after: tuple  # ``capture``'s tuple after the step
    peak_bytes: int  # the step's ``mx.get_peak_memory()``
    footprint_bytes: int  # largest active + cache at a miss within the step (0: no miss)
    outcome: tuple  # ``StepOutcome``'s fields
    grow_events: int  # growth events the step added
    bytes_copied: int  # bytes the step copied
    decisions: tuple  # allocator decisions the step logged (fast mode's cycle check)


def static_id(static: Hashable) -> int:
    """A small id for an engine's static part (equal parts, equal ids)."""
    return _statics.setdefault(static, len(_statics))


def capture(engine: object) -> tuple:
    """The mutable state a step reads and writes, as a hashable tuple (``restore`` writes it back)."""
    e = engine
    layers = tuple((st.capacity_rows, st.held_rows, st.buffer_rows, tuple(st.buffers.items()), tuple(st.blocks))
                   for st in e.layers)
    table = tuple((bid, b.length_bytes, b.refs, b.label) for bid, b in e.buffers.table.items())
    alloc, ev = e.alloc, e.eval_state
    frees = tuple((t, tuple(bids)) for t, bids in ev.frees)
    return (layers, tuple(e.prev_outputs), table, e.buffers.next_id, alloc.active_bytes, alloc.fresh_bytes,
            tuple(alloc.cache._lru.values()), ev.dispatch_phase, ev.clock_s, ev.device_free_s, frees)


def restore(engine: object, state: tuple, buffer_type: type) -> None:
    """Write ``capture``'s tuple back: fresh objects, nothing shared with the cache entry."""
    e = engine
    layers, prev, table, next_id, active, fresh, cached, phase, clock, device_free, frees = state
    for st, (cap, held, rows, bufs, blocks) in zip(e.layers, layers):
        st.capacity_rows, st.held_rows, st.buffer_rows = cap, held, rows
        st.buffers, st.blocks = dict(bufs), list(blocks)
    e.prev_outputs = list(prev)
    e.buffers.table = {bid: buffer_type(length, refs, label) for bid, length, refs, label in table}
    e.buffers.next_id = next_id
    alloc, ev = e.alloc, e.eval_state
    alloc.active_bytes, alloc.fresh_bytes = active, fresh
    alloc.cache.reload(cached)  # oldest first: the LRU and size orders come back
    ev.dispatch_phase, ev.clock_s, ev.device_free_s = phase, clock, device_free
    ev.frees = deque((t, list(bids)) for t, bids in frees)


def get(key: Hashable) -> StepEntry | None:
    entry = _entries.get(key)
    if entry is not None:
        _entries.move_to_end(key)
    return entry


def put(key: Hashable, entry: StepEntry) -> None:
    _entries[key] = entry
    if len(_entries) > MAX_ENTRIES:
        _entries.popitem(last=False)


def clear() -> None:
    """Forget every step (the static ids stay: an engine still running keeps its own)."""
    _entries.clear()
