"""MLX's evaluation order: ``eval_impl``'s degree count and width-limited BFS tape.

A port of ``mlx/transforms.cpp`` (MLX 0.32): the tape is built breadth-first from the
outputs with at most ``max_width`` pending arrays, then executed from the back.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.graph import Array

SYNC = -1  # the synchronizer node that takes every output as input


def execution_order(arrays: Sequence[Array], outputs: Sequence[int], max_width: int = 20) -> list[int]:
    """Ids of the arrays to evaluate, in the order MLX dispatches them."""

    def inputs(a: int) -> Sequence[int]:
        return outputs if a == SYNC else arrays[a].inputs

    def unscheduled(a: int) -> bool:
        return bool(arrays[a].prim)

    degree: dict[int, int] = {}
    stack: list[list[int]] = [[SYNC, 0]]
    while stack:
        top = stack[-1]
        ins = inputs(top[0])
        if top[1] < len(ins):
            x = ins[top[1]]
            top[1] += 1
            if x not in degree:
                stack.append([x, 0])
                degree[x] = 1
                for s in arrays[x].siblings:
                    degree[s] = 1
            else:
                degree[x] += 1
                for s in arrays[x].siblings:
                    degree[s] += 1
            continue
        stack.pop()

    tape: list[int] = [SYNC]
    pending: list[tuple[int, int]] = []
    i = 0
    while degree and (i < len(tape) or pending):
        if i >= len(tape):
            a, j = pending.pop()
        else:
            a, j = tape[i], 0
            i += 1
        ins = inputs(a)
        while j < len(ins):
            x = ins[j]
            if not unscheduled(x):
                j += 1
                continue
            if len(tape) - i >= max_width:
                pending.append((a, j))
                break
            degree[x] -= 1
            if degree[x] != 0:
                for s in arrays[x].siblings:
                    degree[s] -= 1
                j += 1
                continue
            del degree[x]
            for s in arrays[x].siblings:
                degree.pop(s, None)
            tape.append(x)
            j += 1
    return [a for a in reversed(tape) if a != SYNC]
