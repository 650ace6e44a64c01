"""The lazy MLX graph one step of the reference workload builds, op for op.

Mirrors what ``mx.export_to_dot`` shows for mlx-lm's ``KVCache`` and the contract's
consumers: views (Slice, Broadcast, Squeeze, Transpose, ExpandDims) share a buffer,
other ops allocate their output at dispatch unless they donate an input's buffer.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

VIEW_PRIMS = frozenset({"Slice", "Broadcast", "Squeeze", "Transpose", "ExpandDims"})


@dataclass(slots=True)
class Array:
    """One lazy array (graph node output) or leaf.

    Args:
        nbytes: Bytes of the array's buffer if it allocates one.
        prim: Primitive that produces it, or ``""`` for a leaf (already evaluated).
        inputs: Ids of the input arrays, in MLX's order.
        kernels: Kernel dispatches its ``eval_cpu``/``eval_gpu`` makes.
        work_bytes: Bytes its kernels read and write (for the time model).
        donors: Input positions whose buffer it may take over (donation), in order.
        py_held: Python keeps a reference after the step (cache state, outputs).
        siblings: Other outputs of the same primitive (quantize).
        label: ``(layer, buffer name)`` for KV buffers, else ``None``.
        extra_gpu_nodes: CUDA graph nodes beyond one per kernel dispatch the CPU makes (a
            reduction's copy of a strided input, a large all-reduce's second pass).
        gpu_temps_bytes: Buffers its CUDA kernels allocate for themselves (that copy, the
            all-reduce's partial sums), held until the command buffer completes.
        elements: Elements MLX counts when a kernel reads it (``data_size()``, toward a CUDA command
            buffer's element limit), a leaf's (weights) included; -1: not known, ``nbytes / 2``.
        waits: CUDA: the host waits for the command buffer holding this op to complete (a float32 GEMM).
        fenced: Computed on another stream than the eval's (a model's lazy state, built on the default
            stream): its kernels run in a command buffer of their own, committed when it is done, and every
            op that reads it in the same eval waits on its fence (``eval_impl``'s ``needs_fence``).
        inline: Not a node of MLX's graph but work its one reader's eval does first (a copy of an input the
            primitive cannot read as strided): the tape runs it right before that reader
            (``tape.execution_order``).
    """

    nbytes: int
    prim: str = ""
    inputs: Sequence[int] = ()
    kernels: int = 0
    work_bytes: int = 0
    donors: tuple[int, ...] = ()
    py_held: bool = False
    siblings: Sequence[int] = ()
    label: tuple[int, str] | None = None
    eager: bool = False  # a scalar leaf allocated when Python builds the graph
    buffer_id: int = -1  # for a persistent leaf: the engine's buffer id
    extra_gpu_nodes: int = 0
    gpu_temps_bytes: tuple[int, ...] = ()
    elements: int = -1
    waits: bool = False
    fenced: bool = False
    inline: bool = False

    @property
    def is_view(self) -> bool:
        return self.prim in VIEW_PRIMS

    @property
    def gpu_nodes(self) -> int:
        """CUDA graph nodes MLX counts: one per kernel, plus ``extra_gpu_nodes``; a concatenation's
        concurrent copies add an empty join node (``CommandEncoder::ConcurrentContext``)."""
        return self.kernels + self.extra_gpu_nodes + (self.prim == "Concatenate")


@dataclass(slots=True)
class StepGraph:
    """All arrays of one step, in creation order, and the outputs ``mx.eval`` receives."""

    arrays: list[Array] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    topology: Hashable | None = None  # names the graph's shape (sizes aside) where known: its order is reused

    def leaf(self, nbytes: int, buffer_id: int, py_held: bool = True, label: tuple[int, str] | None = None) -> int:
        self.arrays.append(Array(nbytes, py_held=py_held, buffer_id=buffer_id, label=label))
        return len(self.arrays) - 1

    def scalar(self, itemsize_bytes: int) -> int:
        """An eager scalar (``array(0.5)``): allocated when Python builds the graph."""
        self.arrays.append(Array(itemsize_bytes, eager=True))
        return len(self.arrays) - 1

    def op(
        self,
        prim: str,
        inputs: list[int],
        nbytes: int = 0,
        kernels: int = 1,
        work_bytes: int | None = None,
        donors: tuple[int, ...] = (),
    ) -> int:
        if prim in VIEW_PRIMS:  # shares its input's buffer: no allocation, no kernel, no work
            nbytes, kernels, work_bytes = self.arrays[inputs[0]].nbytes, 0, 0
        self.arrays.append(
            Array(nbytes, prim, inputs, kernels, nbytes if work_bytes is None else work_bytes, donors)
        )
        return len(self.arrays) - 1

    def view(self, prim: str, src: int) -> int:
        return self.op(prim, [src])

    def scaled(self, src: int, rows_bytes: int, itemsize_bytes: int, whole: bool) -> int:
        """``src[:, :, :rows, :] * c``: a Slice (unless whole), a broadcast scalar, a Multiply."""
        sliced = src if whole else self.view("Slice", src)
        scalar = self.view("Broadcast", self.scalar(itemsize_bytes))
        return self.op("Multiply", [sliced, scalar], rows_bytes, work_bytes=2 * rows_bytes, donors=(0, 1))

    def zeros(self, nbytes: int, itemsize_bytes: int) -> int:
        """``mx.zeros``: an eager scalar, a Broadcast and a Full that allocates."""
        return self.op("Full", [self.view("Broadcast", self.scalar(itemsize_bytes))], nbytes)
