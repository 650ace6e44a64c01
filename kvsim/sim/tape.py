"""MLX's evaluation order: ``eval_impl``'s degree count and width-limited BFS tape.

A port of ``mlx/transforms.cpp`` (MLX 0.32): the tape is built breadth-first from the
outputs with at most ``max_width`` pending arrays, then executed from the back.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.sim.graph import Array

SYNC = -1  # the synchronizer node that takes every output as input


def execution_order(arrays: Sequence[Array], outputs: Sequence[int], max_width: int = 20) -> list[int]:
    """Ids of the arrays to evaluate, in the order MLX dispatches them.

    Arrays are created inputs-first, so one backward sweep finds what the outputs reach; every
    reached array is expanded once, as MLX's DFS does, and each input edge adds one to the
    degree of the input and of its siblings. Siblings (outputs of one primitive) share their
    inputs, and MLX's DFS expands a sibling group once: the first member it reaches.
    An ``inline`` array is no node of MLX's graph: the walk reads through it to its inputs, and the tape runs it
    right before the array that reads it.
    """
    inline = [a for a, arr in enumerate(arrays) if arr.inline]
    if inline:
        return _with_inline(arrays, outputs, max_width, set(inline))
    return _tape(arrays, [arr.inputs for arr in arrays], outputs, max_width)


def _with_inline(arrays: Sequence[Array], outputs: Sequence[int], max_width: int, inline: set[int]) -> list[int]:
    """The tape of the graph with ``inline`` arrays read through, each then placed right before its reader."""
    def through(ins: Sequence[int]) -> list[int]:
        return [y for x in ins for y in (through(arrays[x].inputs) if x in inline else (x,))]

    inputs_of = [through(arr.inputs) if any(x in inline for x in arr.inputs) else arr.inputs for arr in arrays]
    tape: list[int] = []

    def emit_inline(a: int) -> None:
        for x in arrays[a].inputs:
            if x in inline:
                emit_inline(x)
                tape.append(x)

    for a in _tape(arrays, inputs_of, outputs, max_width):
        emit_inline(a)
        tape.append(a)
    return tape


def _tape(arrays: Sequence[Array], inputs_of: Sequence[Sequence[int]], outputs: Sequence[int],
          max_width: int) -> list[int]:
    """``execution_order`` over ``inputs_of``, each array's inputs as MLX's graph has them."""
    reached = bytearray(len(arrays))
    for o in outputs:
        reached[o] = 1
    for a in range(len(arrays) - 1, -1, -1):
        if reached[a]:
            for x in inputs_of[a]:
                reached[x] = 1
    siblings = [arr.siblings for arr in arrays]
    degree: dict[int, int] = {}
    get = degree.get
    expand = [SYNC, *(i for i in range(len(arrays)) if reached[i])]
    if any(siblings):  # a sibling group is expanded once: its first reached member
        groups: set[int] = set()  # by their smallest member
        kept = [SYNC]
        for a in expand[1:]:
            if siblings[a]:
                group = min(a, *siblings[a])
                if group in groups:
                    continue
                groups.add(group)
            kept.append(a)
        expand = kept
    for a in expand:
        for x in outputs if a == SYNC else inputs_of[a]:
            degree[x] = get(x, 0) + 1
            for s in siblings[x]:
                degree[s] = get(s, 0) + 1
    scheduled = [bool(arr.prim) for arr in arrays]

    tape: list[int] = [SYNC]
    pending: list[tuple[int, int]] = []
    i, size = 0, 1
    while degree and (i < size or pending):
        if i >= size:
            a, j = pending.pop()
        else:
            a, j = tape[i], 0
            i += 1
        ins = outputs if a == SYNC else inputs_of[a]
        n = len(ins)
        while j < n:
            x = ins[j]
            j += 1
            if not scheduled[x]:
                continue
            if size - i >= max_width:
                pending.append((a, j - 1))
                break
            d = degree[x] - 1
            sibs = siblings[x]
            if d != 0:
                degree[x] = d
                for s in sibs:
                    degree[s] -= 1
                continue
            del degree[x]
            for s in sibs:
                degree.pop(s, None)
            tape.append(x)
            size += 1
    tape.reverse()
    tape.pop()  # the synchronizer
    return tape
