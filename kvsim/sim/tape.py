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
    """
    inputs_of = [arr.inputs for arr in arrays]
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
