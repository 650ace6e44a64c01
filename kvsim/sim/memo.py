"""Results of identical simulations, kept per process: a dashboard re-render or a sweep that asks
again for a scenario it has (whatever its id) gets the same result back at once.

A simulation is a pure function of the scenario (its id aside), the profile and the options, so a
hit is exact. ``clear()`` forgets everything (benchmarks time cold runs).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

from kvsim.sim import step_cache
from kvsim.sim.eval_sim import clear_plans

MAX_ENTRIES = 128  # results kept (least recently used dropped first)

T = TypeVar("T")
_results: OrderedDict[Hashable, object] = OrderedDict()


def key(scenario: object, *options: Hashable) -> Hashable:
    """The memo key: the scenario without its id, and everything else the result depends on."""
    return (dataclasses.replace(scenario, id=None), *options)  # type: ignore[type-var]


def cached(k: Hashable, compute: Callable[[], T], keep: Callable[[T], bool] = lambda _: True) -> T:
    """``compute()``'s value for ``k``, computed once while kept; values ``keep`` refuses (too large)
    are returned, not kept."""
    try:
        hit = k in _results
    except TypeError:  # an unhashable part (a profile built by hand): computed, not kept
        return compute()
    if hit:
        _results.move_to_end(k)
        return _results[k]  # type: ignore[return-value]
    value = compute()
    if not keep(value):
        return value
    _results[k] = value
    if len(_results) > MAX_ENTRIES:
        _results.popitem(last=False)
    return value


def clear() -> None:
    """Forget every result, every step result (``kvsim.sim.step_cache``) and every evaluation plan."""
    _results.clear()
    step_cache.clear()
    clear_plans()
