"""Which layers receive a row in each decode step, as a few repeating patterns."""

from __future__ import annotations

import math


def step_patterns(ratios: list[int], start: int, count: int) -> tuple[dict[frozenset[int], int], dict[frozenset[int], int]]:
    """For decode steps ``start .. start+count-1``: how many steps give rows to exactly the
    ratios in each pattern (the ratios dividing t+1), and the last step of each pattern."""

    def pattern(t: int) -> frozenset[int]:
        return frozenset(r for r in ratios if (t + 1) % r == 0)

    period = math.lcm(*ratios)
    end = start + count
    counts: dict[frozenset[int], int] = {}
    if count <= 2 * period:
        for t in range(start, end):
            counts[pattern(t)] = counts.get(pattern(t), 0) + 1
    else:  # whole periods, then the remainder
        whole, rest = divmod(count, period)
        for t in range(start, start + period):
            counts[pattern(t)] = counts.get(pattern(t), 0) + whole
        for t in range(start + whole * period, end):
            counts[pattern(t)] = counts.get(pattern(t), 0) + 1
    last: dict[frozenset[int], int] = {}
    for t in range(end - 1, max(start, end - period) - 1, -1):
        last.setdefault(pattern(t), t)
    return counts, last
