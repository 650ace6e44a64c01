"""A run-length timeline that also holds affine blocks: a cycle of runs repeated ``m`` times, each
repetition moved by one delta (``kvsim.sim.extrapolate``). Runs are made only when read, so a
10M-token prediction costs what its distinct cycles cost, not what its runs cost.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import overload

from kvsim.sim.result import TimelineRun

FIELDS = TimelineRun.__slots__


@dataclass(frozen=True, slots=True)
class AffineBlock:
    """``repeats`` copies of ``cycle``; copy ``k`` (from 1) is ``cycle[j] + k * deltas[j]`` field by field."""

    cycle: tuple[TimelineRun, ...]  # the cycle before the first copy
    deltas: tuple[tuple[int, ...], ...]  # per run: one delta per field (0 for the flag)
    repeats: int

    def __len__(self) -> int:
        return len(self.cycle) * self.repeats

    def run(self, i: int) -> TimelineRun:
        k, j = divmod(i, len(self.cycle))
        return _moved(self.cycle[j], self.deltas[j], k + 1)

    def peak(self) -> tuple[int, int]:
        """(largest peak, index of its first run) within the block."""
        best = (-1, 0)
        n = len(self.cycle)
        for j, (run, d) in enumerate(zip(self.cycle, self.deltas)):
            dp = d[FIELDS.index("peak_bytes")]
            k = self.repeats if dp > 0 else 1
            value = run.peak_bytes + k * dp
            index = (k - 1) * n + j
            if value > best[0] or value == best[0] and index < best[1]:
                best = (value, index)
        return best

    def first_over(self, limit_bytes: int) -> int | None:
        """Index of the first run whose peak exceeds ``limit_bytes``, or ``None``."""
        n, hits = len(self.cycle), []
        for j, (run, d) in enumerate(zip(self.cycle, self.deltas)):
            dp, p = d[FIELDS.index("peak_bytes")], run.peak_bytes
            if dp > 0:  # the smallest k >= 1 with p + k dp > limit
                k = max(1, (limit_bytes - p) // dp + 1)
            else:  # peaks do not rise: the first copy or none
                k = 1 if p + dp > limit_bytes else self.repeats + 1
            if k <= self.repeats:
                hits.append((k - 1) * n + j)
        return min(hits) if hits else None


def _moved(run: TimelineRun, delta: tuple[int, ...], k: int) -> TimelineRun:
    return TimelineRun(*(v if isinstance(v, bool) else v + k * d
                         for v, d in zip((getattr(run, f) for f in FIELDS), delta)))


class Timeline(Sequence[TimelineRun]):
    """Runs in order: plain runs and affine blocks, read like a tuple of ``TimelineRun``."""

    def __init__(self) -> None:
        self._blocks: list[list[TimelineRun] | AffineBlock] = [[]]
        self._starts: list[int] = [0]  # index of each block's first run
        self._len = 0

    # ---- building ---------------------------------------------------------------------------
    def append(self, run: TimelineRun) -> None:
        last = self._blocks[-1]
        if isinstance(last, AffineBlock):
            self._starts.append(self._len)
            self._blocks.append(last := [])
        last.append(run)
        self._len += 1

    def extend_affine(self, cycle: Sequence[TimelineRun], previous: Sequence[TimelineRun], repeats: int) -> None:
        """Append ``repeats`` copies of ``cycle``, each moved by ``cycle - previous`` once more."""
        deltas = tuple(tuple(0 if isinstance(v, bool) else v - q
                             for v, q in zip((getattr(x, f) for f in FIELDS), (getattr(p, f) for f in FIELDS)))
                       for x, p in zip(cycle, previous))
        block = AffineBlock(tuple(cycle), deltas, repeats)
        self._starts.append(self._len)
        self._blocks.append(block)
        self._len += len(block)

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` runs (an affine block is cut to whole copies of its cycle, then runs)."""
        while self._len > n:
            block, start = self._blocks[-1], self._starts[-1]
            keep = max(0, n - start)
            if isinstance(block, list):
                del block[keep:]
            elif keep:
                whole, rest = divmod(keep, len(block.cycle))
                tail = [block.run(whole * len(block.cycle) + j) for j in range(rest)]
                self._blocks[-1] = AffineBlock(block.cycle, block.deltas, whole) if whole else []
                if tail:
                    self._starts.append(start + whole * len(block.cycle))
                    self._blocks.append(tail)
            else:
                self._blocks[-1] = []
            self._len = n if keep else start
            if not self._blocks[-1] and len(self._blocks) > 1:
                self._blocks.pop()
                self._starts.pop()
        if not self._blocks:
            self._blocks, self._starts = [[]], [0]

    # ---- reading ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> TimelineRun: ...
    @overload
    def __getitem__(self, i: slice) -> list[TimelineRun]: ...
    def __getitem__(self, i: int | slice) -> TimelineRun | list[TimelineRun]:
        if isinstance(i, slice):
            start, stop, step = i.indices(self._len)
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            return list(islice(self._iter_from(start), max(0, stop - start)))
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("timeline index out of range")
        b = self._block_of(i)
        block, offset = self._blocks[b], i - self._starts[b]
        return block[offset] if isinstance(block, list) else block.run(offset)

    def _block_of(self, i: int) -> int:
        import bisect

        return bisect.bisect_right(self._starts, i) - 1

    def __iter__(self) -> Iterator[TimelineRun]:
        return self._iter_from(0)

    def _iter_from(self, start: int) -> Iterator[TimelineRun]:
        if start >= self._len:
            return
        b = self._block_of(start)
        offset = start - self._starts[b]
        for block in self._blocks[b:]:
            if isinstance(block, list):
                yield from block[offset:]
            else:
                for j in range(offset, len(block)):
                    yield block.run(j)
            offset = 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != self._len:
            return NotImplemented if not isinstance(other, Sequence) else False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Timeline({self._len} runs, {len(self._blocks)} blocks)"

    # ---- without making every run -------------------------------------------------------------
    def peak_index(self) -> int:
        """Index of the first run with the largest peak (``max(runs, key=peak_bytes)``'s)."""
        best = (-1, 0)
        for start, block in zip(self._starts, self._blocks):
            if isinstance(block, list):
                if block:
                    j = max(range(len(block)), key=lambda j: block[j].peak_bytes)
                    value, index = block[j].peak_bytes, start + j
                else:
                    continue
            else:
                value, j = block.peak()
                index = start + j
            if value > best[0]:
                best = (value, index)
        return best[1]

    def step_transients(self) -> list[tuple[int, int]]:
        """``kvsim.sim.peak_range.step_transients`` of the runs, reading only each block's first and last
        copy: within a block both entries of a run are maxima of quantities affine in the copy number,
        so whatever is taken over them (a largest weighted sum) is at one of the two ends."""
        out, before = [], 0
        for block in self._blocks:
            if isinstance(block, list):
                copies: list[list[TimelineRun]] = [block]
                lead_ins = [before]
            else:
                n, ends = len(block.cycle), sorted({1, block.repeats})
                copies = [[block.run((k - 1) * n + j) for j in range(n)] for k in ends]
                lead_ins = [before if k == 1 else block.run((k - 1) * n - 1).active_bytes for k in ends]
            for runs, lead_in in zip(copies, lead_ins):
                prev = lead_in
                for run in runs:
                    out.append((max(prev, run.active_bytes), run.peak_bytes))
                    if run.step_count > 1:
                        out.append((run.active_bytes, run.peak_bytes))
                    prev = run.active_bytes
            if copies and copies[-1]:
                before = copies[-1][-1].active_bytes
        return out

    def first_over(self, limit_bytes: int) -> int | None:
        """Index of the first run whose peak exceeds ``limit_bytes``, or ``None``."""
        for start, block in zip(self._starts, self._blocks):
            if isinstance(block, list):
                j = next((j for j, run in enumerate(block) if run.peak_bytes > limit_bytes), None)
            else:
                j = block.first_over(limit_bytes)
            if j is not None:
                return start + j
        return None


def thinned(runs: Sequence[TimelineRun], max_runs: int) -> Iterator[TimelineRun]:
    """The runs to draw: all of them when few, else every plain run and, of each affine block,
    evenly spaced copies (the first and the last included) so that about ``max_runs`` come out."""
    if not isinstance(runs, Timeline) or len(runs) <= max_runs:
        yield from runs
        return
    blocks = runs._blocks
    copies = sum(b.repeats for b in blocks if isinstance(b, AffineBlock))
    room = max(2 * sum(isinstance(b, AffineBlock) for b in blocks), max_runs - sum(len(b) for b in blocks if isinstance(b, list)))
    for block in blocks:
        if isinstance(block, list):
            yield from block
            continue
        n, keep = len(block.cycle), max(2, block.repeats * room // max(1, copies) // max(1, len(block.cycle)))
        picks = sorted({round(i * (block.repeats - 1) / (keep - 1)) for i in range(keep)}) if block.repeats > 1 else [0]
        for k in picks:
            yield from (block.run(k * n + j) for j in range(n))


def peak_run(runs: Sequence[TimelineRun]) -> TimelineRun:
    """The first run with the largest peak, of a ``Timeline`` or any sequence."""
    if isinstance(runs, Timeline):
        return runs[runs.peak_index()]
    return max(runs, key=lambda r: r.peak_bytes)


def first_over(runs: Sequence[TimelineRun], limit_bytes: int) -> TimelineRun | None:
    """The first run whose peak exceeds ``limit_bytes``."""
    if isinstance(runs, Timeline):
        i = runs.first_over(limit_bytes)
        return None if i is None else runs[i]
    return next((r for r in runs if r.peak_bytes > limit_bytes), None)
