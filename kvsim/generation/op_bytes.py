"""What each op of one real forward allocates, evaluated alone: the measurement ``trace`` is checked against.

Every op ``kvsim.generation.trace`` intercepts (``MX_FUNCTIONS``, ``METHODS``, ``FAST_FUNCTIONS``) is wrapped: its
inputs are evaluated first, then ``mx.clear_cache()`` and ``mx.reset_peak_memory()``, the op is evaluated and
synchronized, and the peak above the active memory before it is its bytes (outputs and temporaries). Calls made
inside a wrapped op are not wrapped again; compiled functions run op by op (``mx.disable_compile``). Used by
``tests/test_generation_cpu_ops.py`` (the CPU, ``mx.fast`` as its fallback graphs) and
``docs/tools/device/op_bytes_cuda.py`` (CUDA, ``mx.fast`` as MLX runs it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import mlx.core as mx

from kvsim.generation import fallbacks
from kvsim.generation import trace as tr
from kvsim.generation.trace import _arrays

OpBytes = tuple[str, int, list[list[int]]]
"""An intercepted call: its op, the bytes it allocated evaluated alone, its outputs' shapes."""


def _measured(op: str, fn: Callable, log: list[OpBytes], depth: list[int]) -> Callable:
    """``fn`` evaluated alone after its inputs, its peak above the memory before it appended to ``log``."""

    def run(*args: Any, **kwargs: Any) -> Any:
        if depth[0]:
            return fn(*args, **kwargs)
        ins = [*_arrays(args), *_arrays(list(kwargs.values()))]
        if ins:
            mx.eval(ins)
        depth[0] += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            depth[0] -= 1
        outs = list(_arrays(out))
        if outs:
            mx.synchronize()
            mx.clear_cache()
            base = mx.get_active_memory()
            mx.reset_peak_memory()
            mx.eval(outs)
            mx.synchronize()
            log.append((op, max(mx.get_peak_memory() - base, 0), [list(o.shape) for o in outs]))
        return out

    return run


@contextmanager
def measuring_ops(fast_fallbacks: bool) -> Iterator[list[OpBytes]]:
    """Within the block every intercepted op is measured alone into the yielded list; ``fast_fallbacks``: the
    ``mx.fast`` ops run as their fallback graphs (``fallbacks``, what the CPU builds), else as MLX runs them."""
    log: list[OpBytes] = []
    depth = [0]
    with tr.patching() as patch:
        tr.patch_array_ops(patch, lambda op, fn: _measured(op, fn, log, depth))
        for op in tr.FAST_FUNCTIONS:
            patch(mx.fast, op, getattr(fallbacks, op) if fast_fallbacks
                  else _measured("fast." + op, getattr(mx.fast, op), log, depth))
        yield log
