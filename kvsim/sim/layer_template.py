"""A layer's part of a step graph, built once per step and copied for every identical layer.

Models repeat a few layer shapes many times (DS4: 21 ratio-4 and 20 ratio-128 layers; llama: 32 of one),
and layers of one shape in one state build the same ops: the same primitives, sizes and donors, inputs
inside the layer or on the step's shared pool leaf. Only the array ids (an offset), the leaves' buffer
ids and the labels' layer index differ. ``LayerTemplate`` records what ``Engine._add_layer`` built and
appends a copy with those three things moved; its ``topology`` (primitives, flags and relative inputs,
not sizes) names the layer's shape of graph, so that a step's evaluation order can be reused by every
step of the same shape (``kvsim.sim.eval_sim.prepare``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from kvsim.sim.graph import Array, StepGraph

_topologies: dict[Hashable, int] = {}  # a layer's topology -> a small id


@dataclass(frozen=True, slots=True)
class LayerTemplate:
    """The arrays one layer added to a step graph, with inputs relative to its first array.

    ``inputs`` and ``siblings`` hold, per array, ids relative to the layer's first array (>= 0) or
    ``-1 - id`` for an array the layer shares (a pool leaf made by an earlier layer)."""

    arrays: tuple[Array, ...]
    inputs: tuple[tuple[int, ...], ...]
    siblings: tuple[tuple[int, ...], ...]
    leaves: tuple[tuple[int, str], ...]  # (relative id, component) of the leaves holding the layer's buffers
    output: int  # relative id of the layer's output (the consumer's read)
    topology: int  # id of the layer's graph shape (sizes aside)
    grow_events: int  # growth events the layer added
    copied_bytes: int  # bytes its growth copies
    grew: bool
    written: bool  # it receives rows (``_StepBuild.written``)

    @classmethod
    def record(cls, g: StepGraph, first: int, leaves: dict[str, int], pooled: bool, grow_events: int,
               copied_bytes: int, grew: bool, written: bool) -> LayerTemplate:
        """The template of arrays ``first ..`` of ``g`` (the layer just built); ``leaves``: component -> leaf id;
        ``pooled``: the step's pool leaf was there before the layer (else the layer made it, just before ``first``)."""
        arrays = tuple(g.arrays[first:])

        def rel(ids: object) -> tuple[int, ...]:
            return tuple(x - first if x >= first else -1 - x for x in ids)  # type: ignore[attr-defined]

        inputs = tuple(rel(a.inputs) for a in arrays)
        siblings = tuple(rel(a.siblings) for a in arrays)
        output = g.outputs[-1] - first
        shape = (pooled, output, tuple((bool(a.prim), a.eager, a.py_held, ins, sib) for a, ins, sib in zip(arrays, inputs, siblings)))
        topology = _topologies.setdefault(shape, len(_topologies))
        return cls(arrays, inputs, siblings, tuple((x - first, name) for name, x in leaves.items()), output, topology,
                   grow_events, copied_bytes, grew, written)

    def copy_into(self, g: StepGraph, index: int, buffers: dict[str, int], leaf_buffers: dict[int, int]) -> None:
        """Append the layer's arrays for layer ``index`` whose buffers are ``buffers`` (component -> buffer id)."""
        base = len(g.arrays)
        out = g.arrays
        for a, ins, sib in zip(self.arrays, self.inputs, self.siblings):
            out.append(Array(
                a.nbytes, a.prim, [base + x if x >= 0 else -1 - x for x in ins], a.kernels, a.work_bytes, a.donors,
                a.py_held, [base + x if x >= 0 else -1 - x for x in sib] if sib else (),
                None if a.label is None else (index, a.label[1]), a.eager, a.buffer_id, a.extra_gpu_nodes,
                a.gpu_temps_bytes,
            ))
        for x, name in self.leaves:
            out[base + x].buffer_id = leaf_buffers[base + x] = buffers[name]
        g.outputs.append(base + self.output)
