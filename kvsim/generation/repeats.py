"""A compiled function called again with arguments like its last call's: its recorded nodes copied, not traced again.

mlx-lm runs some recurrences as a Python loop over a chunk's tokens: ``gated_delta_ops`` (Qwen3-Next and
Qwen3.5's Gated DeltaNet layers off Metal, ``mlx_lm/models/gated_delta.py``) calls the compiled
``_gated_delta_step_ops`` once per token and layer. Traced op by op, a 2,048-token chunk of Qwen3-Next-80B is 1.6 M
intercepted calls, and recording that chunk took 176 s of a 207 s prediction. A compiled function is pure: what
it records depends only on its arguments' shapes, dtypes, strides and buffers, and which of them are the same
array (``call_key``). So the first call of each such key is traced as before (fused by ``_fuse_compiled``), and a
later call copies those nodes with its own arguments in place (``copy``) and returns lazy zeros of the first call's
shapes and dtypes in its structure (``results``): nothing is evaluated, so only shapes and dtypes are read.
``tests/test_generation_repeats.py`` checks the copied graph is the traced one.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, fields
from typing import Any

from kvsim.sim.graph import Array

FIELDS = tuple(f.name for f in fields(Array))
"""``Array``'s fields in its constructor's order."""
Ref = tuple[str, int]
"""Where a recorded node's input lies: ``("node", k)`` the call's k-th node, ``("arg", i)`` its i-th array
argument, ``("outer", n)`` node ``n`` recorded before the call (a constant the function closes over)."""


@dataclass(frozen=True, slots=True)
class Repeat:
    """The nodes one compiled call recorded, with their inputs as ``Ref``s."""

    fields: tuple[tuple[Any, ...], ...]
    """Each node's ``Array`` fields, in order (``inputs`` and ``siblings`` set by ``refs``)."""
    refs: tuple[tuple[Ref, ...], ...]
    """Each node's inputs."""
    sibling_refs: tuple[tuple[Ref, ...], ...]
    outputs: tuple[Ref, ...]
    """The nodes bound to the arrays the function returns, in order."""
    skeleton: Any
    """The function's result with each array replaced by its ``(shape, dtype)``."""
    shapes: tuple[Any, ...]
    """Each node's ``Trace.shapes`` entry (``None``: none)."""
    layouts: tuple[Any, ...]
    leaves: tuple[Any, ...]
    """Each node's ``Trace.leaf_arrays`` entry (``None``: not a leaf Python made inside the call)."""


def call_key(t: Any, fn: Any, args: tuple, kwargs: dict, arg_nodes: list[int]) -> Hashable:
    """What a compiled call's recorded nodes depend on: the function, each argument's shape, dtype, strides,
    bytes, producing primitive and whether an earlier eval computed it (an array) or value (anything else), and
    which arguments are the same node."""
    nodes = t.graph.arrays

    def part(x: Any) -> Hashable:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            n = t.node_of.get(id(x))
            if n is None:
                return ("array", tuple(x.shape), str(x.dtype))
            return ("array", tuple(x.shape), str(x.dtype), t.layout.get(n), nodes[n].nbytes, nodes[n].prim,
                    n in t.evaluated)
        if isinstance(x, (list, tuple)):
            return tuple(part(y) for y in x)
        return ("value", repr(x))

    same = tuple(arg_nodes.index(n) for n in arg_nodes)
    return (id(fn), tuple(part(a) for a in args), tuple((k, part(v)) for k, v in sorted(kwargs.items())), same)


def skeleton(out: Any) -> Any:
    """``out`` with each array replaced by its ``(shape, dtype)``; ``None`` where it holds anything but arrays,
    lists and tuples."""
    if hasattr(out, "shape") and hasattr(out, "dtype"):
        return ("array", tuple(out.shape), out.dtype)
    if isinstance(out, (list, tuple)):
        parts = [skeleton(x) for x in out]
        return None if None in parts else (type(out), parts)
    return None


def results(shape: Any) -> Any:
    """A result like the one ``skeleton`` describes: lazy zeros in its structure (made while nothing records)."""
    import mlx.core as mx

    if shape[0] == "array":
        return mx.zeros(shape[1], shape[2])
    kind, parts = shape
    return kind(results(p) for p in parts)


def remember(t: Any, start: int, arg_nodes: list[int], outputs: list[int], out: Any) -> Repeat | None:
    """The nodes ``start:`` one compiled call recorded (already fused), as a ``Repeat``; ``None`` where its result
    is not arrays in lists and tuples, or returns an array it did not make."""
    arrays = t.graph.arrays
    position = {n: i for i, n in reversed(list(enumerate(arg_nodes)))}

    def ref(n: int) -> Ref:
        if n >= start:
            return ("node", n - start)
        return ("arg", position[n]) if n in position else ("outer", n)

    made = range(start, len(arrays))
    shape = skeleton(out)
    if shape is None or any(n < start for n in outputs):
        return None
    return Repeat(tuple(tuple(getattr(arrays[n], f) for f in FIELDS) for n in made),
                  tuple(tuple(map(ref, arrays[n].inputs)) for n in made),
                  tuple(tuple(map(ref, arrays[n].siblings)) for n in made), tuple(map(ref, outputs)), shape,
                  tuple(t.shapes.get(n) for n in made), tuple(t.layout.get(n) for n in made),
                  tuple(t.leaf_arrays.get(n) for n in made))


def copy(t: Any, repeat: Repeat, arg_nodes: list[int], out: list[Any]) -> None:
    """Append ``repeat``'s nodes reading ``arg_nodes``, and bind ``out`` (the arrays of ``results``, in order)
    to the copies of its outputs."""
    arrays = t.graph.arrays
    start = len(arrays)

    def node(r: Ref) -> int:
        kind, k = r
        return start + k if kind == "node" else arg_nodes[k] if kind == "arg" else k

    for k, values in enumerate(repeat.fields):
        a = Array(*values)
        a.inputs = [node(r) for r in repeat.refs[k]]
        if a.siblings:
            a.siblings = [node(r) for r in repeat.sibling_refs[k]]
        arrays.append(a)
        n = start + k
        if repeat.shapes[k] is not None:
            t.shapes[n] = repeat.shapes[k]
        if repeat.layouts[k] is not None:
            t.layout[n] = repeat.layouts[k]
        if repeat.leaves[k] is not None:
            t.leaf_arrays[n] = repeat.leaves[k]
    for a, r in zip(out, repeat.outputs, strict=True):
        n = node(r)
        t.bind(a, n, t.layout.get(n))
