"""Which layers receive a row in each decode step, as a few repeating patterns."""

from __future__ import annotations

import math
from collections import Counter
from functools import cache


@cache
def _by_residue(ratios: tuple[int, ...]) -> tuple[frozenset[int], ...]:
    """The pattern of a step whose ``t + 1`` is ``j`` modulo the ratios' lcm, for each ``j``."""
    return tuple(frozenset(r for r in ratios if j % r == 0) for j in range(math.lcm(*ratios)))


def step_patterns(ratios: list[int], start: int, count: int) -> tuple[dict[frozenset[int], int], dict[frozenset[int], int]]:
    """For decode steps ``start .. start+count-1``: how many steps give rows to exactly the
    ratios in each pattern (the ratios dividing t+1), in order of first appearance, and the last
    step of each pattern."""
    table = _by_residue(tuple(ratios))
    period = len(table)

    def window(first: int, n: int) -> list[frozenset[int]]:  # patterns of steps first .. first+n-1 (n <= period)
        j = (first + 1) % period
        return list(table[j:j + n]) + list(table[:max(0, j + n - period)])

    end = start + count
    if count <= 2 * period:
        counts = Counter(window(start, min(count, period)))
        counts.update(window(start + period, count - period) if count > period else [])
    else:  # whole periods, then the remainder
        whole, rest = divmod(count, period)
        counts = Counter({p: n * whole for p, n in Counter(window(start, period)).items()})
        counts.update(window(start + whole * period, rest))
    tail = max(start, end - period)
    last: dict[frozenset[int], int] = {}
    for k, p in enumerate(reversed(window(tail, end - tail))):
        last.setdefault(p, end - 1 - k)
    return dict(counts), last
