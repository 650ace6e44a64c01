"""Fast mode: repeating cycles of decode-loop iterations derived instead of replayed.

Under a ``step`` policy every growth step has the graph of the one before with buffers a step
longer, so the engine's state (rows, buffer lengths, the allocator's counters and cached buffers,
the scheduler clock) moves by the same amount every cycle. When three consecutive cycles of loop
iterations have the same structure (buffer roles and reference counts, the cached buffers' LRU
and size orders, the dispatch phase), make the same allocator decisions, and move every number
by one delta (integers exactly, seconds within ``FLOAT_RTOL``; a running total such as bytes
copied by a delta that itself moves by one), the engine jumps ``m`` cycles: it writes the state
``m`` cycles on, appends the skipped cycles' timeline (an affine block, ``kvsim.sim.timeline``),
step times and events, and plays the next cycle op by op. The jump stands only if that cycle lands
where the deltas say with the same decisions; otherwise the engine is restored and tries half.

Why the ends suffice: a decision compares two quantities that move linearly with the cycle
number, so it changes at most once; a cache hit is two such comparisons (``BufferCache.take``'s
window), so each is logged as the ranks of the request and of its reuse bound among the cached
lengths. Equal at the cycles before the jump and at the one after it means equal at every cycle
between. Limits: host and device clocks are maxima of such quantities (a CPU task waits for the
device), so a free landing before or after a malloc is only checked at the ends; and a cache
whose contents never repeat (CUDA's, which keeps every old buffer) or whose size order keeps
changing (ds4's ratio-128 layers under ``step``) gives no cycle, and the run is played in full.
``simulate(exact=True)`` is the op-by-op reference; ``tests/test_extrapolate.py`` and
``docs/tools/bench_speed.py`` compare the two.
"""

from __future__ import annotations

import bisect
import copy
import math
from dataclasses import dataclass

from kvsim.scenario.parse import Scenario
from kvsim.sim import step_cache
from kvsim.sim.allocator import rounded_size
from kvsim.sim.engine import Engine, StepOutcome, simulate_timeline
from kvsim.sim.eval_sim import Buffer
from kvsim.sim.profile import BackendProfile
from kvsim.sim.result import MemoryEvent, TimelineRun
from kvsim.sim.timeline import Timeline
from policies.growth import LowPeakPolicy

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
    logged: bool  # allocator decisions were being logged


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
    # Cached buffers: their LRU order and their order by size repeat; their lengths may move.
    lru_rank = {seq: i for i, seq in enumerate(cache._lru)}
    by_size = tuple(lru_rank[seq] for _, seq in cache._sizes)
    structure.append(("cache", len(cache), by_size, e.eval_state.dispatch_phase, len(e.eval_state.frees)))
    values += cache._lru.values()  # lengths, oldest first
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
    cache = e.alloc.cache
    lengths = [next(it) for _ in range(len(cache))]
    cache.clear()
    for length in lengths:  # oldest first, as they were put
        cache.put(length)
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
        self.timeline = Timeline()  # skipped cycles are affine blocks, made into runs when read
        self.decisions: list[tuple[int, ...]] = []
        self.logging = False  # decisions are logged from the first candidate cycle on (it costs a call per malloc)
        s, w = self.scenario, self.scenario.workload
        self._static = step_cache.static_id((  # what a step reads that no step changes
            self.profile, s.consumer, w.prefill_chunk, w.batch, tuple(self.pool_buffers.items()),
            tuple((st.spec, st.components, isinstance(st.policy, LowPeakPolicy)) for st in self.layers),
        ))

    def step(self, start: int, n: int) -> StepOutcome:
        """``Engine.step``, or the same step's result from ``kvsim.sim.step_cache`` where this state met it before."""
        plan = self.plan(start, n)
        if self.record_events or self.eval_state.commit_nodes is not None:  # events carry step indices and times
            return self.play_step(plan)
        key = (self._static, self.logging, tuple((rows, growth) for _, rows, growth in plan), step_cache.capture(self))
        entry = step_cache.get(key)
        if entry is None:
            entry = self._played(plan)
            step_cache.put(key, entry)
            return StepOutcome(*entry.outcome)
        step_cache.restore(self, entry.after, Buffer)
        self.alloc.peak_bytes = entry.peak_bytes
        self.alloc.footprint_peak_bytes = max(self.alloc.footprint_peak_bytes, entry.footprint_bytes)
        self.grow_events += entry.grow_events
        self.bytes_copied += entry.bytes_copied
        self.decisions.extend(entry.decisions)
        return StepOutcome(*entry.outcome)

    def _played(self, plan: list) -> step_cache.StepEntry:
        """Play the step; return what it did, for the step cache."""
        footprint, self.alloc.footprint_peak_bytes = self.alloc.footprint_peak_bytes, 0
        grow_events, logged = self.grow_events, len(self.decisions)
        out = self.play_step(plan)
        step_footprint = self.alloc.footprint_peak_bytes
        self.alloc.footprint_peak_bytes = max(footprint, step_footprint)
        return step_cache.StepEntry(
            step_cache.capture(self), self.alloc.peak_bytes, step_footprint,
            (out.active_bytes, out.cache_bytes, out.peak_bytes, out.seconds, out.grew, out.copied_bytes),
            self.grow_events - grow_events, out.copied_bytes, tuple(self.decisions[logged:]),
        )

    def _log_decisions(self) -> None:
        """Wrap this engine's allocator so that each malloc and free appends its decision."""
        self.logging = True
        alloc, log = self.alloc, self.decisions
        cache, profile = alloc.cache, self.profile
        malloc, free = type(alloc).malloc.__get__(alloc), type(alloc).free.__get__(alloc)
        sizes, window = cache._sizes, cache.window_bytes

        def logged_malloc(size_bytes: int) -> int:
            # Where the request and its reuse bound fall among the cached lengths (allocator.BufferCache.take):
            # each comparison with a cached length is monotone in the cycle number, so equal ranks at
            # both ends of a jump mean equal comparisons at every cycle between.
            size = rounded_size(profile, size_bytes)
            lo = bisect.bisect_left(sizes, (size, -1))
            hi = bisect.bisect_left(sizes, (min(2 * size, size + window), -1))
            length = malloc(size_bytes)  # a hit: which cached buffer is told by how much longer it is
            log.append((lo, hi, length - size_bytes if alloc.fresh_bytes == 0 and length else -1, len(cache)))
            return length

        def logged_free(length_bytes: int) -> None:
            free(length_bytes)
            log.append((-1, -1, -2, len(cache)))

        alloc.malloc, alloc.free = logged_malloc, logged_free

    def run(self, env):  # noqa: ANN001, ANN201 - a simpy process, as Engine.run
        start = yield from self.prefill(env)
        end = self.scenario.workload.total_tokens
        self._boundaries: list[Boundary] = [self._boundary(start)]
        self._by_structure: dict[tuple, list[int]] = {self._boundaries[0].structure: [0]}
        self._quiet_until = 0  # no jump is tried before this many boundaries (after a failed one)
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
        return Boundary(start, (start % lcm, *structure), tuple(values), outputs, self.logging)

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
            if not marks[0].logged:  # a candidate: log decisions from now on, decide three cycles later
                if not self.logging:
                    self._log_decisions()
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

    def _decisions(self, a: Boundary, b: Boundary) -> list[tuple[int, ...]]:
        return self.decisions[a.outputs[4]:b.outputs[4]]

    def _try_jump(self, end: int) -> int | None:
        """Jump over whole cycles if the last three repeat; return the new start token."""
        if len(self._boundaries) < self._quiet_until:
            return None
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
            self._append_cycles(cycle, prev, m)
            _write_values(self, _ahead(last.values, delta, curve, m))
            want = (_ahead(last.values, delta, curve, m + 1), _predict(cycle, prev, m + 1), self._decisions(before, last))
            if self._verify(last.start_token + m * tokens, end, period, *want):
                return self._boundaries[-1].start_token
            self._restore(snapshot)
            m //= 2
        self._quiet_until = len(self._boundaries) + period  # no new attempt within the next cycle
        return None

    def _append_cycles(self, cycle: Outputs, prev: Outputs, m: int) -> None:
        """Append the outputs of the ``m`` cycles after ``cycle``, each moved one more delta."""
        sinks = (self.timeline, self.growth_s, self.decode_s, self.events)
        for sink, xs, ps in zip(sinks, cycle, prev):
            if not xs:
                continue
            if sink is self.timeline:
                self.timeline.extend_affine(xs, ps, m)
                continue
            if isinstance(xs[0], float):
                steps = [(x, x - p) for x, p in zip(xs, ps)]
                sink.extend(x + k * d for k in range(1, m + 1) for x, d in steps)
                continue
            make = type(xs[0])
            rows = [(_fields(x), tuple(0 if isinstance(v, (bool, str)) else v - q
                                       for v, q in zip(_fields(x), _fields(p)))) for x, p in zip(xs, ps)]
            sink.extend(make(*[v if isinstance(v, (bool, str)) else v + k * d for v, d in zip(f, ds)]) if any(ds) else x
                        for k in range(1, m + 1) for (f, ds), x in zip(rows, xs))

    def _cycles_before_threshold(self, delta: tuple) -> int:
        """Cycles before a layer that does not grow in the cycle would fill (it would then grow)."""
        best = 1 << 62
        for i, st in enumerate(self.layers):
            d_cap, d_held = delta[3 * i], delta[3 * i + 1]
            if d_cap == 0 and d_held > 0:
                best = min(best, (st.capacity_rows - st.held_rows) // d_held - 1)
        return best

    def _verify(self, start: int, end: int, period: int, values: list, want: Outputs,
                decisions: list[tuple[int, ...]]) -> bool:
        """Play one cycle op by op from the jumped state; it must land on ``values`` with ``want`` outputs.
        The jumped state and the played iterations are recorded like any others."""
        self._record(start)
        jumped = self._boundaries[-1]
        for _ in range(period):
            if start >= end:
                return False
            start, _ = self.iteration(start, end)
            self._record(start)
        landed = self._boundaries[-1]
        ok = landed.structure == jumped.structure and _same(landed.values, tuple(values))
        return ok and self._decisions(jumped, landed) == decisions and _all_match(self._outputs(jumped, landed), want)

    GROWING = ("timeline", "growth_s", "decode_s", "events", "decisions", "_boundaries", "_by_structure")

    def _snapshot(self) -> tuple[Engine, dict[str, int]]:
        """A copy of the state; the append-only outputs are only measured (restore truncates them)."""
        lengths = {name: len(getattr(self, name)) for name in self.GROWING[:6]}
        detached = {name: self.__dict__.pop(name) for name in self.GROWING}
        keep = {id(self.profile): self.profile, id(self.scenario): self.scenario, id(self.workspace): self.workspace,
                id(self.memo): self.memo}  # the pattern memo only ever gains entries that stay true
        try:
            return copy.deepcopy(self, keep), lengths
        finally:
            self.__dict__.update(detached)

    def _restore(self, snapshot: tuple[Engine, dict[str, int]]) -> None:
        state, lengths = snapshot
        kept = {name: self.__dict__[name] for name in self.GROWING}
        for i in range(lengths["_boundaries"], len(self._boundaries)):
            self._by_structure[self._boundaries[i].structure].remove(i)
        for name, n in lengths.items():
            xs = kept[name]
            if isinstance(xs, Timeline):
                xs.truncate(n)
            else:
                del xs[n:]
        self.__dict__.update(state.__dict__)
        self.__dict__.update(kept)
        self.buffers.on_event = self._on_event if self.record_events else None
        if self.logging:
            self._log_decisions()


def play(scenario: Scenario, profile: BackendProfile, record_events: bool = True, exact: bool = False) -> Engine:
    """The scenario's run: fast mode, or with ``exact`` the op-by-op reference (``Engine``)."""
    return simulate_timeline(scenario, profile, record_events, None if exact else FastEngine)
