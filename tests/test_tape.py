"""The fast tape order equals a literal port of MLX's ``eval_impl`` DFS + width-limited BFS."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.sim.graph import Array
from kvsim.sim.tape import SYNC, execution_order


def literal_port(arrays: Sequence[Array], outputs: Sequence[int], max_width: int = 20) -> list[int]:
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


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[Array], list[int]]:
    arrays: list[Array] = []
    size = draw(st.integers(1, 60))
    while len(arrays) < size:
        i = len(arrays)
        leaf = i == 0 or draw(st.booleans()) and draw(st.booleans())
        if leaf:
            arrays.append(Array(4))
            continue
        ins = draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=3))
        group = list(range(i, i + draw(st.sampled_from((1, 1, 1, 2, 3)))))  # outputs of one primitive
        for a in group:  # siblings share the primitive's inputs, as MLX's do
            arrays.append(Array(4, prim="Op", inputs=list(ins), siblings=[s for s in group if s != a]))
    ops = [i for i, a in enumerate(arrays) if a.prim]
    outputs = draw(st.lists(st.sampled_from(ops), min_size=1, max_size=25)) if ops else []
    return arrays, outputs


@settings(max_examples=300, deadline=None)
@given(graphs(), st.integers(1, 25))
def test_fast_tape_equals_literal_port(graph: tuple[list[Array], list[int]], width: int) -> None:
    arrays, outputs = graph
    assert execution_order(arrays, outputs, width) == literal_port(arrays, outputs, width)


def test_deepest_first_within_width() -> None:
    leaf = Array(4)
    a = Array(4, prim="A", inputs=[0])
    b = Array(4, prim="B", inputs=[1])
    assert execution_order([leaf, a, b], [2]) == [1, 2]
