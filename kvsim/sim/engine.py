"""The simulator: a simpy process plays the generation step by step, layer by layer.

Growth steps are evaluated op by op (``eval_sim``); runs of decode steps in which no
layer grows are skipped in bulk: their memory repeats, so a few representative steps
stand for the whole run. Cost therefore grows with growth events, not with tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import simpy

from kvsim.scenario.layer import layer_buffers
from kvsim.scenario.parse import Scenario
from kvsim.scenario.spec import LayerSpec
from kvsim.sim.allocator import Allocator
from kvsim.sim.eval_sim import Buffer, Buffers, EvalState, donatable, run_eval
from kvsim.sim.graph import StepGraph
from kvsim.sim.layer_ops import Component, LayerStep, fetch_held, read, update
from kvsim.sim.layer_template import LayerTemplate
from kvsim.sim.patterns import step_patterns
from kvsim.sim.profile import BackendProfile
from kvsim.sim.result import MemoryEvent, TimelineRun
from kvsim.sim.workspace import load_workspace_table
from policies.growth import Growth, GrowthPolicy, LowPeakPolicy, Mechanism, RotatingPolicy


@dataclass(slots=True, eq=False)
class LayerState:
    """One layer's cache between steps: capacity, live rows and its buffers."""

    spec: LayerSpec
    policy: GrowthPolicy
    components: tuple[Component, ...]
    capacity_rows: int = 0
    held_rows: int = 0
    buffers: dict[str, int] = field(default_factory=dict)  # component -> buffer id
    buffer_rows: int = 0  # rows of the buffers above: the capacity, or a paged layer's newest block
    blocks: list[int] = field(default_factory=list)  # paged: earlier blocks (buffer ids)
    kind: int = 0  # layers of one kind have equal spec, policy and components (``Engine.__init__``)


@dataclass(slots=True)
class StepOutcome:
    active_bytes: int
    cache_bytes: int
    peak_bytes: int
    seconds: float
    grew: bool
    copied_bytes: int


@dataclass(slots=True)
class _StepBuild:
    """A step's graph while it is built: its leaves' buffers, the input pools, the layers written."""

    graph: StepGraph
    leaf_buffers: dict[int, int] = field(default_factory=dict)
    pools: dict[tuple[int, int, str], int] = field(default_factory=dict)  # (heads, dim, dtype) -> pool leaf
    written: list[tuple[int, LayerState, Growth | None, int]] = field(default_factory=list)
    copied_bytes: int = 0
    grew: bool = False


class Engine:
    """Runs one scenario on one backend profile."""

    def __init__(self, scenario: Scenario, profile: BackendProfile, record_events: bool = True) -> None:
        self.scenario = scenario
        self.profile = profile
        self.alloc = Allocator(profile)
        self.events: list[MemoryEvent] = []
        self.record_events = record_events
        self.buffers = Buffers(self.alloc, self._on_event if record_events else None)
        self.eval_state = EvalState()
        reads_matmuls = scenario.consumer == "sdpa" and profile.matmul_workspace  # only the fallback attention
        self.workspace = load_workspace_table(profile.matmul_workspace) if reads_matmuls else None
        if self.workspace is not None and self.workspace.mlx_version != profile.mlx_version:
            raise ValueError(f"matmul_workspace: probes measured MLX {self.workspace.mlx_version}, "
                             f"the {profile.name} profile MLX {profile.mlx_version}")
        w = scenario.workload
        self.layers = [
            LayerState(lay, pol := scenario.layer_policy(lay),
                       layer_buffers(lay, pol, batch=w.batch, kv_buffers=scenario.model.kv_buffers))
            for lay in scenario.model.layers
        ]
        kinds: dict[tuple, int] = {}
        for st in self.layers:
            st.kind = kinds.setdefault((st.spec, st.policy, st.components), len(kinds))
        self.pool_buffers: dict[tuple[int, int, str], int] = {}
        for shape in scenario.model.shapes():
            bid = self.buffers.new(0, 0.0)  # the pool is in the baseline: charged 0
            self.buffers.incref(bid)
            self.pool_buffers[shape] = bid
        self.prev_outputs: list[int] = []
        self.step_index = 0
        self.timeline: list[TimelineRun] = []
        self.grow_events = 0
        self.bytes_copied = 0
        self.memo: dict[tuple, tuple[int, float]] = {}
        self.growth_s: list[float] = []
        self.decode_s: list[float] = []

    def _on_event(self, kind: str, buf: Buffer, t: float) -> None:
        assert buf.label is not None
        layer, name = buf.label
        self.events.append(MemoryEvent(self.step_index, layer, kind, name, buf.length_bytes, t, self.alloc.active_bytes))

    # ---- one step -------------------------------------------------------------------------
    def plan(self, start: int, n: int) -> list[tuple[LayerState, int, Growth | None]]:
        """Each layer's rows and growth in the step of tokens ``start .. start+n-1`` (asked once per kind and state)."""
        out, seen = [], {}
        for st in self.layers:
            key = (st.kind, st.capacity_rows, st.held_rows)
            made = seen.get(key)
            if made is None:
                rows = st.spec.rows_in_step(start, n)
                growth = st.policy.grow(st.capacity_rows, st.held_rows, rows) if rows else None
                if growth is None and rows and isinstance(st.policy, RotatingPolicy):
                    growth = st.policy.trim(st.capacity_rows, rows)
                made = seen[key] = (rows, growth)
            out.append((st, *made))
        return out

    def step(self, start: int, n: int) -> StepOutcome:
        """Build and evaluate one step's graph; update the layers' state."""
        return self.play_step(self.plan(start, n))

    def play_step(self, plan: list[tuple[LayerState, int, Growth | None]]) -> StepOutcome:
        """``step`` with its plan made: each layer's rows and growth."""
        for bid in self.prev_outputs:  # `outs = []` drops last step's outputs
            self.buffers.decref(bid, 0.0)
        self.prev_outputs = []
        self.alloc.reset_peak()
        build = _StepBuild(StepGraph())
        self.barrier_s, self.barrier_arrays = 0.0, 0
        templates: dict[tuple, LayerTemplate] = {}
        shapes: list[int] | None = []  # the layers' topologies: the step's, unless a barrier eval intervenes
        for i, (st, rows, growth) in enumerate(plan):
            if rows or st.held_rows:
                shape = self._add_layer_once(build, templates, i, st, rows, growth)
                shapes = None if shape is None or shapes is None else [*shapes, shape]
        build.graph.topology = None if shapes is None else tuple(shapes)
        held, seconds = self._evaluate(build)
        self._store(build, held)
        self.prev_outputs = [held[o] for o in build.graph.outputs]
        self.bytes_copied += build.copied_bytes
        return StepOutcome(
            self.alloc.active_bytes, self.alloc.cache_bytes, self.alloc.peak_bytes, seconds, build.grew,
            build.copied_bytes,
        )

    def _add_layer_once(self, build: _StepBuild, templates: dict[tuple, LayerTemplate], i: int, st: LayerState,
                        rows: int, growth: Growth | None) -> int | None:
        """``_add_layer``, or a copy of an identical layer's part built earlier in this step; returns the
        layer's topology id (``None`` for a lowpeak growth, whose barrier evals are played as they come)."""
        lay = st.spec
        if growth is not None and growth.mechanism is Mechanism.CONCAT and isinstance(st.policy, LowPeakPolicy):
            self._add_layer(build, i, st, rows, growth)
            return None
        pooled = (lay.kv_heads, lay.head_dim, lay.dtype) in build.pools
        key = (st.kind, rows, st.held_rows, st.capacity_rows, st.buffer_rows, growth, tuple(st.buffers), pooled)
        t = templates.get(key)
        if t is None:
            g = build.graph
            first, grow_events, copied, leaves = len(g.arrays), self.grow_events, build.copied_bytes, len(build.leaf_buffers)
            self._add_layer(build, i, st, rows, growth)
            mine = {st.buffers[c.name]: c.name for c in st.components if c.name in st.buffers}
            layer_leaves = {mine[b]: x for x, b in list(build.leaf_buffers.items())[leaves:] if b in mine}
            added = self.grow_events - grow_events
            t = templates[key] = LayerTemplate.record(  # past the pool leaf a first layer of its shape made
                g, first + (not pooled), layer_leaves, pooled, added, build.copied_bytes - copied, added > 0, bool(rows))
            return t.topology
        t.copy_into(build.graph, i, st.buffers, build.leaf_buffers)
        if t.written:
            build.written.append((i, st, growth, rows))
        self.grow_events += t.grow_events
        build.copied_bytes += t.copied_bytes
        build.grew = build.grew or t.grew
        return t.topology

    def _add_layer(self, build: _StepBuild, i: int, st: LayerState, rows: int, growth: Growth | None) -> None:
        """One layer's part of the step graph: its update (or fetch) and the consumer's read."""
        g, w, lay = build.graph, self.scenario.workload, st.spec
        key = (lay.kv_heads, lay.head_dim, lay.dtype)
        if key not in build.pools:
            build.pools[key] = g.leaf(0, self.pool_buffers[key])
            build.leaf_buffers[build.pools[key]] = self.pool_buffers[key]
            self.buffers.incref(self.pool_buffers[key])
        if growth is not None and growth.mechanism is Mechanism.CONCAT and isinstance(st.policy, LowPeakPolicy):
            build.copied_bytes += self.grow_at_barrier(i, st, growth)
            self.grow_events += 1
            build.grew, growth = True, None
        ls = LayerStep(
            index=i, rows=rows, held_rows=st.held_rows, capacity_rows=st.capacity_rows, growth=growth,
            pool_rows=w.prefill_chunk, pool=build.pools[key], k_itemsize_bytes=lay.itemsize_bytes,
            q_row_bytes=lay.row_bytes * w.batch, batch_heads=lay.kv_heads * w.batch, dtype=lay.dtype,
        )
        in_place = growth is not None and growth.mechanism is Mechanism.IN_PLACE
        old: dict[str, int] = {}
        for c in st.components:
            if c.name in st.buffers:  # held by Python unless this step replaces it (a paged block stays)
                held_on = rows == 0 or in_place
                old[c.name] = g.leaf(st.buffer_rows * c.row_bytes, st.buffers[c.name], py_held=held_on)
                build.leaf_buffers[old[c.name]] = st.buffers[c.name]
        fetched = update(g, ls, st.components, old) if rows else fetch_held(g, ls, old)
        capacity = growth.capacity_rows if growth is not None else st.capacity_rows
        returned_rows = min(st.held_rows + rows, capacity)  # a rotating cache returns at most its buffer
        g.outputs.append(read(g, ls, st.components, fetched, self.scenario.consumer, returned_rows,
                              self.profile.sdpa_kernels, self.workspace))
        if rows:
            build.written.append((i, st, growth, rows))
            if growth is not None and growth.mechanism is not Mechanism.FRESH:
                self.grow_events += 1
                build.grew = True
                if not in_place:
                    build.copied_bytes += sum(growth.kept_rows * c.row_bytes for c in st.components)

    def _evaluate(self, build: _StepBuild) -> tuple[dict[int, int], float]:
        """The step's ``mx.eval``: Python-held arrays' buffers and the step's seconds (barriers included)."""
        p, g = self.profile, build.graph
        if self.barrier_arrays:  # the step's own mx.eval follows its last barrier after the same host time
            self.eval_state.clock_s += p.host_eval_call_s
        held, main_s = run_eval(g, build.leaf_buffers, self.buffers, p, self.eval_state)
        seconds = (self.barrier_s + main_s) * p.eval_time_scale + (len(g.arrays) + self.barrier_arrays) * p.python_array_s
        for leaf in build.pools.values():  # the graph's pool leaves took a reference each
            self.buffers.decref(held.pop(leaf), seconds)
        return held, seconds

    def _store(self, build: _StepBuild, held: dict[int, int]) -> None:
        """The caches' new state: each written layer's capacity, rows and buffers."""
        g = build.graph
        by_label = {g.arrays[a].label: b for a, b in held.items() if g.arrays[a].label is not None}
        for index, st, growth, rows in build.written:
            if growth is not None:
                st.buffer_rows = growth.capacity_rows
                if growth.mechanism is Mechanism.IN_PLACE:
                    st.blocks.extend(st.buffers.values())
                    st.buffer_rows = growth.extension_rows
                st.capacity_rows = growth.capacity_rows
            st.held_rows = min(st.held_rows + rows, st.capacity_rows)
            for c in st.components:
                st.buffers[c.name] = by_label[(index, c.name)]

    def grow_at_barrier(self, index: int, st: LayerState, growth: Growth) -> int:
        """lowpeak: each buffer's ``concat([prefix, zeros])`` evaluated alone (``mx.eval``), in
        program order, so its old copy is freed before the next buffer grows. Returns bytes copied."""
        copied = 0
        for c in st.components:
            sub = StepGraph()
            old = sub.leaf(st.buffer_rows * c.row_bytes, st.buffers[c.name], py_held=False)
            prefix = old if growth.kept_rows == st.capacity_rows else sub.view("Slice", old)
            total = growth.capacity_rows * c.row_bytes
            zeros = sub.zeros(growth.extension_rows * c.row_bytes, c.itemsize_bytes)
            new = sub.op("Concatenate", [prefix, zeros], total, kernels=2, work_bytes=2 * total)
            sub.arrays[new].label = (index, c.name)
            sub.outputs.append(new)
            self.eval_state.clock_s += self.profile.host_eval_call_s  # Python between barriers; late frees land
            held, seconds = run_eval(
                sub, {old: st.buffers[c.name]}, self.buffers, self.profile, self.eval_state, synchronize=False
            )
            self.barrier_s += seconds
            self.barrier_arrays += len(sub.arrays)
            st.buffers[c.name] = held[new]
            copied += growth.kept_rows * c.row_bytes
        st.capacity_rows = st.buffer_rows = growth.capacity_rows
        return copied

    # ---- the run ----------------------------------------------------------------------------
    def kv_bytes(self) -> int:
        return sum(st.capacity_rows * c.row_bytes for st in self.layers for c in st.components)

    def reserved_rows(self) -> int:
        return sum(st.capacity_rows for st in self.layers)

    def next_growth_token(self, start: int) -> int:
        """First decode token index t >= start whose step makes some layer grow."""
        best = math.inf
        seen = set()
        for st in self.layers:
            if (st.kind, st.capacity_rows) in seen:  # the same answer as a layer before
                continue
            seen.add((st.kind, st.capacity_rows))
            held = st.spec.rows_after(start)
            need_rows = held + 1 if st.capacity_rows == 0 else self._rows_to_grow(st, held)
            if need_rows is not None:  # the step from t to t+1 brings row need_rows when t+1 = need_rows·ratio
                best = min(best, need_rows * st.spec.ratio - 1)
        return int(best) if best != math.inf else 1 << 62

    def _rows_to_grow(self, st: LayerState, held_rows: int) -> int | None:
        """Smallest row count whose arrival (one at a time) makes the policy grow."""
        if isinstance(st.policy, RotatingPolicy) and st.policy.trim(st.capacity_rows, 1) is not None:
            return held_rows + 1  # the next row cuts a prefill-grown buffer back to the window
        if st.policy.grow(st.capacity_rows, st.capacity_rows, 1) is None:
            return None  # never grows (a ring at its max size)
        return max(st.capacity_rows + 1, held_rows + 1)

    def add_run(self, first_token: int, count: int, tokens: int, out: StepOutcome) -> None:
        self.timeline.append(
            TimelineRun(
                self.step_index, count, first_token, tokens, out.active_bytes, out.cache_bytes, out.peak_bytes,
                self.reserved_rows(), self.kv_bytes(), out.grew,
            )
        )
        self.step_index += count

    def decode_run(self, start: int, count: int) -> StepOutcome:
        """Steps ``start .. start+count-1`` of one token each, none of which grows.

        A step's graph depends on which layers get a row (the ratios dividing t+1), which hold
        rows, and which are full (no slice on the way out). Fullness changes at most once per
        layer in a run, so the run splits into a few segments of a few step patterns each. Each
        pattern is evaluated once, at its last step (most rows, for ``sdpa``); the run's peak is
        the largest and its time the count-weighted mean.
        """
        end = start + count
        ratios = sorted({st.spec.ratio for st in self.layers})
        cuts = {st.capacity_rows * st.spec.ratio - 1 for st in self.layers if st.capacity_rows}
        edges = [start, *sorted(t for t in cuts if start < t < end), end]
        base_active = self.alloc.active_bytes
        peak, total_s, cache = 0, 0.0, self.alloc.cache_bytes
        for a, b in zip(edges, edges[1:]):
            counts, last = step_patterns(ratios, a, b - a)
            for pattern, n_steps in counts.items():
                delta, secs, cache = self._pattern_step(last[pattern], base_active, cache)
                peak, total_s = max(peak, base_active + delta), total_s + secs * n_steps
        self._advance_rows(end)
        self.decode_s.append(total_s / count)
        return StepOutcome(self.alloc.active_bytes, cache, peak, total_s, False, 0)

    def _pattern_step(self, t: int, base_active: int, cache: int) -> tuple[int, float, int]:
        """Peak over ``base_active`` and seconds of decode step ``t``, evaluated once per signature."""
        sig = tuple(
            (st.spec.rows_in_step(t, 1), st.spec.rows_after(t) > 0, st.spec.rows_after(t + 1) >= st.capacity_rows)
            for st in self.layers
        )
        key = (sig, self.scenario.consumer == "sdpa" and t)
        oversized = self._oversized()
        if key in self.memo and not oversized:
            delta, secs = self.memo[key]
            return delta, secs, cache
        held_before = [st.held_rows for st in self.layers]
        self._advance_rows(t)
        out = self.step(t, 1)
        for st, h in zip(self.layers, held_before):
            st.held_rows = h
        result = (out.peak_bytes - base_active, out.seconds)
        if not oversized:  # a step that copies an oversized buffer is not the pattern's steady state
            self.memo[key] = result
        return *result, out.cache_bytes

    def _oversized(self) -> bool:
        """Whether some cache buffer is too long to be donated to its own update.

        A growth may reuse a cached buffer up to ``reuse_window_bytes`` longer than asked; past
        MLX's donation slack the next update copies it into a buffer of the right size, so that
        step's memory is its own, not the pattern's."""
        table = self.buffers.table
        return any(
            not donatable(table[st.buffers[c.name]].length_bytes, st.buffer_rows * c.row_bytes)
            for st in self.layers
            for c in st.components
            if c.name in st.buffers
        )

    def _advance_rows(self, token: int) -> None:
        for st in self.layers:
            st.held_rows = min(st.spec.rows_after(token), st.capacity_rows) if st.capacity_rows else 0

    def prefill(self, env: simpy.Environment):  # noqa: ANN201 - part of a simpy process
        """The prompt's chunks, one step each; returns the tokens fed (``start = yield from self.prefill(env)``)."""
        start = 0
        for n in self.scenario.workload.prefill_tokens():
            out = self.step(start, n)
            self.add_run(start, 1, n, out)
            (self.growth_s if out.grew else self.decode_s).append(out.seconds)
            yield env.timeout(out.seconds)
            start += n
        return start

    def run(self, env: simpy.Environment):  # noqa: ANN201 - a simpy process
        """The generation as a simpy process: prefill chunks, then decode in bulk runs."""
        start = yield from self.prefill(env)
        end = self.scenario.workload.total_tokens
        while start < end:
            grow_at = self.next_growth_token(start)
            if grow_at > start:
                count = min(grow_at, end) - start
                out = self.decode_run(start, count)
                self.add_run(start, count, 1, out)
                yield env.timeout(out.seconds)
                start += count
                continue
            out = self.step(start, 1)
            self.add_run(start, 1, 1, out)
            (self.growth_s if out.grew else self.decode_s).append(out.seconds)
            yield env.timeout(out.seconds)
            start += 1


def simulate_timeline(
    scenario: Scenario, profile: BackendProfile, record_events: bool = True, engine_class: type[Engine] | None = None
) -> Engine:
    """Run the engine (``engine_class``, by default ``Engine``: op by op) to completion under a simpy
    clock; return it for inspection. ``kvsim.sim.extrapolate.play`` picks fast mode or this."""
    env = simpy.Environment()
    engine = (engine_class or Engine)(scenario, profile, record_events)
    env.process(engine.run(env))
    env.run()
    return engine
