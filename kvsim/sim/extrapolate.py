"""Fast mode: repeating cycles of decode steps derived exactly instead of replayed.

Under a ``step`` policy every growth step has the same graph as the one before, with buffers a
step longer, so the engine's whole state (rows, buffer lengths, the allocator's counters and
cached buffers, the scheduler clock) moves by the same amount every cycle. When three
consecutive cycles of loop iterations have the same structure and move every number by the
same delta (integers exactly, clocks within ``FLOAT_RTOL``), the engine jumps ``m`` cycles
ahead: it writes the state ``m`` deltas on, appends the skipped cycles' timeline runs, step
times and events, and then plays the next cycle op by op. The jump stands only if that cycle
lands exactly where the deltas say; otherwise the engine is restored and tries half the jump.

Every decision the simulator makes compares two quantities (a size with a cache window, a
buffer with the donation slack, a free time with a malloc time); between affine quantities such
a comparison changes at most once, so agreeing at the three cycles before the jump and at the
one after it is agreement at every cycle between. The buffer cache's contents must repeat exactly, and
so must every allocator decision (``FastEngine``). ``simulate(exact=True)`` keeps the op-by-op
reference; ``tests/test_extrapolate.py`` and ``scripts/bench_speed.py`` compare the two.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from kvsim.sim.engine import Engine
from kvsim.sim.result import MemoryEvent, TimelineRun

FLOAT_RTOL = 1e-9  # clocks and step seconds: affine within float rounding
MAX_CYCLE_ITERATIONS = 512  # longest cycle (loop iterations) looked for
MIN_JUMP_CYCLES = 2  # shorter jumps are not worth a snapshot


@dataclass(frozen=True, slots=True)
class Boundary:
    """The engine between two loop iterations: what must repeat exactly and what may move."""

    start_token: int
    structure: tuple  # buffer roles, reference counts, labels, cache size, dispatch phase...
    values: tuple[int | float, ...]  # rows, buffer lengths, counters, clocks: may move by a delta
    outputs: tuple[int, int, int, int, int]  # lengths of timeline, growth_s, decode_s, events, decisions


def _float(x: object) -> bool:
    return isinstance(x, float)


def _state(e: Engine) -> tuple[tuple, list[int | float]]:
    """(structure, values) of everything the next iterations read, in a fixed order.

    ``_write_values`` writes ``values`` back in the same order."""
    roles: dict[int, tuple] = {}
    for i, st in enumerate(e.layers):
        for name, bid in st.buffers.items():
            roles.setdefault(bid, ("L", i, name))
    for key, bid in e.pool_buffers.items():
        roles.setdefault(bid, ("P", key))
    for j, bid in enumerate(e.prev_outputs):
        roles.setdefault(bid, ("O", j))
    structure: list = [tuple(roles.get(b, ("?",)) for b in e.prev_outputs)]
    values: list[int | float] = []
    for st in e.layers:
        structure.append((tuple(st.buffers), len(st.blocks)))
        values += (st.capacity_rows, st.held_rows, st.buffer_rows)
    for bid, buf in e.buffers.table.items():
        structure.append((roles.get(bid, ("?",)), buf.refs, buf.label))
        values.append(buf.length_bytes)
    cache = e.alloc.cache
    # The cached buffers must repeat exactly: extrapolating which buffer sits where in the LRU order
    # is not sound (a growing buffer's place changes when a request first fits it).
    structure.append(("cache", tuple(cache._lru.values()), e.eval_state.dispatch_phase, len(e.eval_state.frees)))
    values += (e.alloc.active_bytes, e.alloc.peak_bytes, e.alloc.fresh_bytes)
    values += (e.eval_state.clock_s, e.eval_state.device_free_s)
    values += (e.step_index, e.grow_events, e.bytes_copied)
    return tuple(structure), values


def _write_values(e: Engine, values: list[int | float]) -> None:
    """Set the numbers ``_state`` reads (same order); the structure is already the same."""
    it = iter(values)
    for st in e.layers:
        st.capacity_rows, st.held_rows, st.buffer_rows = next(it), next(it), next(it)
    for buf in e.buffers.table.values():
        buf.length_bytes = next(it)
    e.alloc.active_bytes, e.alloc.peak_bytes, e.alloc.fresh_bytes = next(it), next(it), next(it)
    e.eval_state.clock_s, e.eval_state.device_free_s = next(it), next(it)
    e.step_index, e.grow_events, e.bytes_copied = next(it), next(it), next(it)


def _delta(a: tuple, b: tuple) -> tuple:
    return tuple(y - x for x, y in zip(a, b))


def _ahead(values: tuple, delta: tuple, curve: tuple, k: int) -> list[int | float]:
    """Values ``k`` cycles on: each cycle adds ``delta``, which itself grows by ``curve`` per cycle."""
    return [v + k * d + c * (k * (k + 1) // 2) for v, d, c in zip(values, delta, curve)]


def _close(x: int | float, y: int | float) -> bool:
    """Integers (bytes, rows, steps) equal; floats (seconds) within ``FLOAT_RTOL``."""
    if isinstance(x, float) or isinstance(y, float):
        return math.isclose(x, y, rel_tol=FLOAT_RTOL, abs_tol=1e-15)
    return x == y


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))


Record = TimelineRun | MemoryEvent | float
Outputs = tuple[list[Record], ...]  # timeline runs, growth step seconds, decode step seconds, events


def _fields(x: Record) -> tuple:
    return (x,) if isinstance(x, float) else tuple(getattr(x, f) for f in x.__slots__)


def _moved(x: Record, prev: Record, k: int) -> Record:
    """``x`` moved ``k`` times its delta from ``prev`` (flags and names kept)."""
    if isinstance(x, float):
        return x + k * (x - prev)
    moved = (v if isinstance(v, (bool, str)) else v + k * (v - q) for v, q in zip(_fields(x), _fields(prev)))
    return type(x)(*moved)


def _matches(x: Record, y: Record) -> bool:
    fx, fy = _fields(x), _fields(y)
    return type(x) is type(y) and all(
        u == v if isinstance(u, (bool, str)) else _close(u, v) for u, v in zip(fx, fy)
    )


def _predict(cycle: Outputs, prev: Outputs, k: int) -> Outputs | None:
    """The outputs ``k`` cycles after ``cycle``, or ``None`` if ``prev`` and ``cycle`` differ in kind."""
    if [len(x) for x in cycle] != [len(x) for x in prev]:
        return None
    out = []
    for xs, ps in zip(cycle, prev):
        if any(type(x) is not type(p) or _kinds(x) != _kinds(p) for x, p in zip(xs, ps)):
            return None
        out.append([_moved(x, p, k) for x, p in zip(xs, ps)])
    return tuple(out)


def _kinds(x: Record) -> tuple:
    return tuple(v for v in _fields(x) if isinstance(v, (bool, str)))


def _all_match(a: Outputs, b: Outputs) -> bool:
    return all(len(xs) == len(ys) and all(map(_matches, xs, ys)) for xs, ys in zip(a, b))


class FastEngine(Engine):
    """The engine with affine cycles of loop iterations jumped over (see the module docstring).

    Every allocator decision (a miss on ``malloc``, or a hit and by how much the cached buffer
    is longer than asked; a freed buffer cached or dropped) is logged; a cycle repeats only if it
    makes the same decisions in the same order, and so must the cycle that verifies a jump.
    """

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - Engine's
        super().__init__(*args, **kwargs)
        self.decisions: list[tuple[int, int]] = []
        alloc, cache, log = self.alloc, self.alloc.cache, self.decisions
        malloc, free = alloc.malloc, alloc.free

        def logged_malloc(size_bytes: int) -> int:
            length = malloc(size_bytes)  # a hit: which cached buffer is told by how much longer it is
            log.append((length - size_bytes if alloc.fresh_bytes == 0 and length else -1, len(cache)))
            return length

        def logged_free(length_bytes: int) -> None:
            free(length_bytes)
            log.append((-2, len(cache)))

        alloc.malloc, alloc.free = logged_malloc, logged_free

    def run(self, env):  # noqa: ANN001, ANN201 - a simpy process, as Engine.run
        w = self.scenario.workload
        start = 0
        for n in w.prefill_tokens():
            out = self.step(start, n)
            self.add_run(start, 1, n, out)
            (self.growth_s if out.grew else self.decode_s).append(out.seconds)
            yield env.timeout(out.seconds)
            start += n
        end = w.total_tokens
        self._boundaries: list[Boundary] = [self._boundary(start)]
        self._by_structure: dict[tuple, list[int]] = {self._boundaries[0].structure: [0]}
        while start < end:
            start, seconds = self.iteration(start, end)
            self._record(start)
            yield env.timeout(seconds)
            jumped = self._try_jump(end)
            if jumped is not None:
                start = jumped

    def iteration(self, start: int, end: int) -> tuple[int, float]:
        """One pass of ``Engine.run``'s decode loop: a run of steps without growth, or one step."""
        grow_at = self.next_growth_token(start)
        if grow_at > start:
            count = min(grow_at, end) - start
            out = self.decode_run(start, count)
            self.add_run(start, count, 1, out)
            return start + count, out.seconds
        out = self.step(start, 1)
        self.add_run(start, 1, 1, out)
        (self.growth_s if out.grew else self.decode_s).append(out.seconds)
        return start + 1, out.seconds

    # ---- cycles --------------------------------------------------------------------------------
    def _boundary(self, start: int) -> Boundary:
        structure, values = _state(self)
        lcm = math.lcm(*(st.spec.ratio for st in self.layers))  # which layers get a row repeats mod lcm
        outputs = (len(self.timeline), len(self.growth_s), len(self.decode_s), len(self.events), len(self.decisions))
        return Boundary(start, (start % lcm, *structure), tuple(values), outputs)

    def _record(self, start: int) -> None:
        b = self._boundary(start)
        self._by_structure.setdefault(b.structure, []).append(len(self._boundaries))
        self._boundaries.append(b)

    def _cycle(self) -> tuple[int, tuple, tuple] | None:
        """(L, per-cycle delta, its own per-cycle change) of the shortest cycle of L iterations that
        the last three repeat: every value a polynomial of degree 2 at most in the cycle number,
        checked at four boundaries (rows and lengths are affine; a running total is quadratic)."""
        bs = self._boundaries
        n = len(bs) - 1
        for prev in reversed(self._by_structure[bs[n].structure][:-1]):
            period = n - prev
            if period > MAX_CYCLE_ITERATIONS or n - 3 * period < 0:
                break
            marks = [bs[n - k * period] for k in (3, 2, 1, 0)]
            if any(m.structure != bs[n].structure for m in marks):
                continue
            deltas = [_delta(a.values, b.values) for a, b in zip(marks, marks[1:])]
            curve = _delta(deltas[0], deltas[1])  # accumulated counters (bytes copied) move by a moving delta
            if not _same(curve, _delta(deltas[1], deltas[2])):
                continue
            made = [self._decisions(a, b) for a, b in zip(marks, marks[1:])]
            if not made[0] == made[1] == made[2]:
                continue
            first, second, third = (self._outputs(a, b) for a, b in zip(marks, marks[1:]))
            predicted = _predict(second, first, 1)
            if predicted is not None and _all_match(predicted, third):
                return period, deltas[2], curve
        return None

    def _outputs(self, a: Boundary, b: Boundary) -> Outputs:
        lists = (self.timeline, self.growth_s, self.decode_s, self.events)
        return tuple(xs[i:j] for xs, i, j in zip(lists, a.outputs, b.outputs))

    def _decisions(self, a: Boundary, b: Boundary) -> list[tuple[int, int]]:
        return self.decisions[a.outputs[4]:b.outputs[4]]

    def _try_jump(self, end: int) -> int | None:
        """Jump over whole cycles if the last three repeat; return the new start token."""
        found = self._cycle()
        if found is None:
            return None
        period, delta, curve = found
        bs = self._boundaries
        last, before, earlier = bs[-1], bs[-1 - period], bs[-1 - 2 * period]
        cycle, prev = self._outputs(before, last), self._outputs(earlier, before)
        tokens = last.start_token - before.start_token
        m = min((end - last.start_token) // tokens - 1, self._cycles_before_threshold(delta))  # keep one to verify
        while m >= MIN_JUMP_CYCLES:
            snapshot = self._snapshot()
            for k in range(1, m + 1):
                self._append(_predict(cycle, prev, k))
            _write_values(self, _ahead(last.values, delta, curve, m))
            start = last.start_token + m * tokens
            want = (_ahead(last.values, delta, curve, m + 1), _predict(cycle, prev, m + 1), self._decisions(before, last))
            landed = self._verify(start, end, period, *want)
            if landed is not None:
                self._reset_history(landed)
                return landed.start_token
            self._restore(snapshot)
            m //= 2
        self._reset_history(self._boundaries[-1])  # look for a new triple from here
        return None

    def _append(self, outputs: Outputs) -> None:
        for sink, xs in zip((self.timeline, self.growth_s, self.decode_s, self.events), outputs):
            sink.extend(xs)

    def _cycles_before_threshold(self, delta: tuple) -> int:
        """Cycles before a layer that does not grow in the cycle would fill (it would then grow)."""
        best = 1 << 62
        for i, st in enumerate(self.layers):
            d_cap, d_held = delta[3 * i], delta[3 * i + 1]
            if d_cap == 0 and d_held > 0:
                best = min(best, (st.capacity_rows - st.held_rows) // d_held - 1)
        return best

    def _verify(self, start: int, end: int, period: int, values: list, want: Outputs,
                decisions: list[tuple[int, int]]) -> Boundary | None:
        """Play one cycle op by op from the jumped state; it must land on ``values`` with ``want`` outputs."""
        jumped = self._boundary(start)
        for _ in range(period):
            if start >= end:
                return None
            start, _ = self.iteration(start, end)
        landed = self._boundary(start)
        ok = landed.structure == jumped.structure and _same(landed.values, tuple(values))
        ok = ok and self._decisions(jumped, landed) == decisions
        return landed if ok and _all_match(self._outputs(jumped, landed), want) else None

    def _reset_history(self, b: Boundary) -> None:
        self._boundaries = [b]
        self._by_structure = {b.structure: [0]}

    def _snapshot(self) -> Engine:
        keep = {id(self.profile): self.profile, id(self.scenario): self.scenario, id(self.workspace): self.workspace}
        return copy.deepcopy(self, keep)

    def _restore(self, snapshot: Engine) -> None:
        self.__dict__.update(snapshot.__dict__)
        self.buffers.on_event = self._on_event if self.record_events else None

