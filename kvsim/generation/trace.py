"""The lazy graph one forward step of an mlx-lm model builds, recorded from the model itself.

Every array operation Python makes (``mx.*`` and ``mx.fast.*`` functions and the ``mx.array`` methods and
operators) is intercepted while the step is built on stand-in weights: nothing is evaluated. Each call
becomes one node of a ``kvsim.sim.graph.StepGraph`` with the real output's ``nbytes``; the rules MLX
applies when it evaluates are added per operation: views share their input's buffer (``Reshape`` only of
a row-contiguous input), element-wise ops may donate an input's buffer, and the fused attention the
backend lacks is expanded into MLX's fallback graph (``mlx/fast.cpp``: scale, ``q @ k.T``, causal mask,
``Select``, precise ``Softmax``, ``@ v``). ``mx.compile`` is disabled while tracing (a compiled
function's cache would otherwise keep traces made on stand-ins) and restored after.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import numpy as np

from kvsim.generation import fallbacks, repeats
from kvsim.generation.layout import (
    Strides,
    broadcast_strides,
    dense,
    elementwise_strides,
    gemm_pointer_batched,
    matmul_operand_copied,
    reshape_strides,
    row_contiguous,
    row_major,
    same_layout,
    span,
    view_strides,
)
from kvsim.sim.attention import fused_attention
from kvsim.sim.graph import Array, StepGraph

VIEW_METHODS = frozenset({"transpose", "swapaxes", "moveaxis", "T", "mT", "squeeze", "expand_dims",
                          "broadcast_to", "view", "split", "diagonal", "as_strided"})
RESHAPES = frozenset({"reshape", "flatten", "unflatten"})
ELEMENTWISE = frozenset({
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__neg__", "__pow__", "__rpow__", "__abs__", "add", "subtract", "multiply", "divide", "maximum",
    "minimum", "where", "exp", "sigmoid", "tanh", "negative", "square", "rsqrt", "sqrt", "erf", "log", "abs",
    "power", "softmax", "clip", "log1p", "expm1", "sin", "cos", "logaddexp", "reciprocal", "softplus", "sign",
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__",
})
IN_PLACE = ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__")
"""``a += b`` and its kin: MLX replaces ``a``'s array by ``add(a, b)`` (``overwrite_descriptor``,
``python/src/array.cpp``); the Python object, and so its ``id``, stays, and its node becomes the op's."""
MX_FUNCTIONS = (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "where", "exp", "sigmoid", "tanh", "negative",
    "square", "rsqrt", "sqrt", "erf", "log", "abs", "power", "softmax", "clip", "log1p", "expm1", "sin", "cos",
    "logaddexp", "reciprocal", "sign", "matmul", "addmm", "concatenate", "concat", "stack", "zeros", "ones",
    "zeros_like", "ones_like", "full", "arange", "broadcast_to", "expand_dims", "squeeze", "reshape",
    "transpose", "swapaxes", "moveaxis", "split", "take", "take_along_axis", "put_along_axis", "argpartition",
    "argsort", "sort", "topk", "sum", "mean", "max", "min", "argmax", "logsumexp", "cumsum", "pad", "repeat",
    "tile", "conv1d", "conv_general", "quantized_matmul", "gather_mm", "gather_qmm", "quantize", "dequantize",
    "einsum", "outer", "tril", "triu", "flatten", "unflatten", "as_strided", "greater", "greater_equal", "less",
    "less_equal", "equal", "not_equal", "logical_not", "logical_and", "logical_or", "floor", "ceil", "round",
    "astype", "isnan", "stop_gradient", "contiguous", "view", "segmented_mm", "block_masked_mm",
    "scatter_add", "slice", "slice_update", "bitwise_and", "left_shift", "right_shift", "rms_norm",
)
FAST_FUNCTIONS = ("rms_norm", "layer_norm", "rope", "scaled_dot_product_attention")
METHODS = (
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__matmul__", "__rmatmul__", "__neg__", "__pow__", "__rpow__", "__abs__", "__getitem__", "__lt__",
    "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__and__", "__or__", "__invert__", "__floordiv__",
    "__mod__", "astype", "reshape", "transpose", "swapaxes", "moveaxis", "squeeze", "flatten", "sum", "mean",
    "max", "min", "argmax", "exp", "log", "sqrt", "rsqrt", "square", "abs", "split", "view", "logsumexp",
    "cumsum", "sigmoid", "round", "T", "mT", *IN_PLACE,
)


@dataclass(slots=True)
class Trace:
    """The graph of one step and the bookkeeping that maps Python arrays to its nodes."""

    sdpa_kernels: str = "fallback"
    bytes_per_flop: float = 0.0
    """Device time of a matmul's arithmetic, as the bytes the profile's time model would move meanwhile."""
    cpu: bool = False
    """Ops follow the CPU backend where it allocates temporaries (a convolution's explicit GEMM, affine
    dequantization's fallback). Every backend fuses compiled functions as ``compile_fuse`` does: the fused
    kernels MLX's CUDA graphs launch are the ``Compiled`` nodes kvsim traces (``docs/generation.md``)."""
    graph: StepGraph = field(default_factory=StepGraph)
    node_of: dict[int, int] = field(default_factory=dict)  # id(mx.array) -> node
    layout: dict[int, Strides] = field(default_factory=dict)  # node -> its array's strides (elements)
    keep: list[Any] = field(default_factory=list)  # every array seen, so ids are never reused
    leaf_arrays: dict[int, Any] = field(default_factory=dict)  # node -> the leaf array
    evaluated: set[int] = field(default_factory=set)  # nodes an earlier eval computed
    known_leaves: set[int] = field(default_factory=set)  # id() of arrays that are leaves (parameters)
    shapes: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # node -> (shape, dtype) of its array
    kernel_bytes_per_flop: dict[str, float] = field(default_factory=dict)
    """Primitives whose arithmetic runs at a rate of its own (``TraceSettings.kernel_bytes_per_flop``); a
    fused attention's arithmetic is timed only where it is listed."""
    kernel_call_bytes: dict[str, float] = field(default_factory=dict)
    """A kernel's time per call beside its arithmetic, as bytes (``TraceSettings.kernel_call_bytes``: a quantized
    matmul per bits, ``"quantized_matmul/4"``)."""
    roofline: bool = False
    """An op's device time is the larger of its bytes read and written and its arithmetic, not their sum
    (``BackendProfile.model_op_time``)."""
    mlx_nodes: bool = False
    """CUDA graph nodes and copies as MLX's encoder makes them (``BackendProfile.model_mlx_nodes``): a pointer-batched
    matmul's second kernel (``gemm_pointer_batched``), no copy of an empty concatenation input, a primitive's own copy
    of an input ``inline``, run right before it (``Array.inline``), and a partial RoPE's copy of a split's part."""
    view_readers: dict[int, int] = field(default_factory=dict)  # node -> views Python took of it (``_shared``)
    pending_args: list[list[tuple[int, Any, Any]]] = field(default_factory=list)  # compiled calls running
    unfused_attention_bytes: int = 0
    """The largest scores of a GPU attention its fused kernels do not serve (MLX's fallback graph), bytes."""
    on_eval: Callable[[list[Any]], None] | None = None  # called by mx.eval / mx.async_eval
    repeated_calls: dict[Any, repeats.Repeat] = field(default_factory=dict)  # a compiled call's key -> its nodes
    depth: int = 0

    def node(self, a: mx.array) -> int:
        """The node of ``a``; an array no recorded op produced is a leaf (weights, cache state, scalars),
        except the output of an ``mx.compile``-d function: MLX hands it back as a new Python object, so an
        unknown array of more than a few elements is the latest recorded array of its shape and dtype."""
        n = self.node_of.get(id(a))
        if n is None and self.pending_args:  # an argument of the compiled function being run
            for i, (arg_node, shape, dtype) in enumerate(self.pending_args[-1]):
                if (shape, dtype) == (a.shape, a.dtype):
                    del self.pending_args[-1][i]
                    self.keep.append(a)
                    self.node_of[id(a)] = arg_node
                    return arg_node
        if n is None and a.size > SMALL_LEAF_ELEMENTS and id(a) not in self.known_leaves:
            n = self._compiled_output(a)
            if n is not None:
                self.keep.append(a)
                self.node_of[id(a)] = n
                return n
        if n is None:
            n = self.graph.leaf(0, -1, py_held=False)
            self.node_of[id(a)] = n
            self.layout[n] = row_major(a.shape)
            self.keep.append(a)
            self.leaf_arrays[n] = a
        return n

    def _compiled_output(self, a: mx.array) -> int | None:
        arrays = self.graph.arrays
        for n in range(len(arrays) - 1, max(-1, len(arrays) - COMPILED_LOOKBACK), -1):
            if arrays[n].prim and self.shapes.get(n) == (a.shape, a.dtype):
                return n
        return None

    def register_leaves(self, arrays: list[mx.array]) -> None:
        """Arrays that are leaves whatever their size (the model's parameters)."""
        self.known_leaves.update(id(a) for a in arrays)
        self.keep.extend(arrays)

    def pending(self, a: mx.array, kernels: int) -> int:
        """Register ``a`` as another stream's unevaluated result (``Array.fenced``) of ``kernels`` kernels."""
        n = self.graph.op("Fenced", [], a.nbytes, kernels=kernels)
        self.graph.arrays[n].fenced = True
        return self.bind(a, n)

    def internal(self, prim: str, inputs: list[int], shape: tuple[int, ...], dtype: mx.Dtype, kernels: int = 1,
                 inline: bool = False) -> int:
        """A node MLX makes that Python never sees (an operand's cast, a copy): its bytes, and its shape, so a CUDA
        command buffer counts its elements (``elements``), not its bytes / 2 (twice a float32 array's).
        ``inline``: the work of its reader's eval, not a graph node of its own (``Array.inline``, where
        ``mlx_nodes``)."""
        n = self.graph.op(prim, inputs, math.prod(shape) * dtype.size, kernels=kernels)
        self.graph.arrays[n].inline = inline and self.mlx_nodes
        self.shapes[n] = (tuple(shape), dtype)
        return n

    def evaluated_leaf(self, a: mx.array) -> int:
        """Register ``a`` as an evaluated array holding its own buffer (a cache advanced untraced)."""
        n = self.node_of.get(id(a))
        if n is None or n not in self.evaluated:
            n = self.graph.leaf(a.nbytes, -1, py_held=False)
            self.bind(a, n)
            self.evaluated.add(n)
        return n

    def bind(self, a: mx.array, n: int, strides: Strides | None = None) -> int:
        """Map ``a`` to node ``n``; ``strides`` (default: row-major) where the node has none yet."""
        self.node_of[id(a)] = n
        self.shapes.setdefault(n, (a.shape, a.dtype))
        if strides is not None or n not in self.layout:
            self.layout[n] = strides if strides is not None else row_major(a.shape)
        self.keep.append(a)
        return n

    def strides(self, n: int, shape: tuple[int, ...]) -> Strides:
        return self.layout.get(n) or row_major(shape)

    def op(self, prim: str, inputs: list[int], out: mx.array, donors: tuple[int, ...] = (), flops: int = 0,
           strides: Strides | None = None, nbytes: int | None = None, bits: int | None = None,
           kernels: int | None = None) -> int:
        """A node computing ``out`` from ``inputs``; ``nbytes``: a buffer MLX sizes otherwise than ``out``;
        ``bits``: a quantized matmul's, where its rate is per bits (2- and 3-bit at the 4-bit one's);
        ``kernels``: its dispatches where ``Trace.kernels`` does not tell them."""
        nbytes = out.nbytes if nbytes is None else nbytes
        moved = nbytes + sum(self.graph.arrays[i].nbytes for i in inputs)
        key = prim if bits is None else f"{prim}/{max(bits, 4)}"
        per_flop = self.kernel_bytes_per_flop.get(key, self.kernel_bytes_per_flop.get(prim, self.bytes_per_flop))
        if flops and math.isfinite(per_flop):
            arithmetic = int(flops * per_flop + self.kernel_call_bytes.get(key, 0.0))
            moved = max(moved, arithmetic) if self.roofline else moved + arithmetic
        kernels = self.kernels(prim, inputs) if kernels is None else kernels
        n = self.graph.op(prim, inputs, nbytes, kernels=kernels, work_bytes=moved, donors=donors)
        return self.bind(out, n, strides or row_major(out.shape))

    @property
    def cuda(self) -> bool:
        """Ops follow MLX's CUDA backend (its fused attention names the backend)."""
        return self.sdpa_kernels == "cuda"

    def kernels(self, prim: str, inputs: list[int]) -> int:
        """Dispatches (CPU) or CUDA graph nodes one call of ``prim`` adds: one, but ``CPU_KERNELS`` and a
        concatenation's copy of each input, which CUDA runs concurrently and joins with an empty node
        (``concatenate_gpu``, ``backend/cuda/slicing.cpp``; ``ConcurrentContext``, ``backend/cuda/device.cpp``);
        an empty input's copy launches nothing (``copy_gpu_inplace`` returns: mlx-lm's ``RotatingKVCache`` joins
        an empty ``keep`` slice to every prefill chunk)."""
        if self.cpu:
            return len(inputs) if prim in CONCATENATES else CPU_KERNELS.get(prim, 1)
        if prim in CONCATENATES and self.cuda:
            empty = sum(1 for i in inputs if i in self.shapes and not math.prod(self.shapes[i][0]))
            return 1 + len(inputs) - (empty if self.mlx_nodes else 0)
        return 1

    def view(self, src: int, out: mx.array, strides: Strides) -> int:
        self.view_readers[src] = self.view_readers.get(src, 0) + 1
        return self.bind(out, self.graph.view("Transpose", src), strides)


def _arrays(x: Any) -> Iterator[mx.array]:
    if isinstance(x, mx.array):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _arrays(y)


CPU_KERNELS = {"addmm": 2, "mean": 3}
"""Dispatches a call makes on the CPU before its holder, where that is not one (``cpu/eval.cpp`` dispatches a
holder after every array; every dispatch counts towards the ``DISPATCHES_PER_TASK`` that close a task,
``cpu/encoder.h``): ``AddMM`` copies ``c`` into the output (``copy_cpu``), then runs the GEMM
(``backend/cpu/matmul.cpp``); ``mean`` is two arrays, ``multiply(sum(a), 1 / n)`` (``ops.cpp``), traced as
one node: the sum's kernel and holder, then the multiply's kernel. ``concatenate`` copies each input
(``Concatenate::eval_cpu``, ``backend/cpu/primitives.cpp``): one kernel per input (``CONCATENATES``)."""
CONCATENATES = frozenset({"concatenate", "concat"})


SMALL_LEAF_ELEMENTS = 64
"""Unknown arrays this small are Python constants (``mx.array(scale)``), never a compiled function's output."""
COMPILED_MODULES = ("mlx_lm", "mlx.nn", "policies")
"""Modules whose ``mx.compile``-d functions are wrapped while tracing."""
COMPILED_LOOKBACK = 256
"""How far back (in nodes) a compiled function's output is looked for."""

MATMULS = frozenset({"__matmul__", "matmul", "addmm", "quantized_matmul", "gather_mm", "gather_qmm", "conv1d",
                     "conv_general", "einsum", "segmented_mm", "block_masked_mm"})


def _arrays_first(args: tuple) -> mx.array:
    return next(_arrays(args))


def _matmul_flops(base: str, args: tuple, out: mx.array) -> int:
    """Twice the multiply-adds of a matmul-like call: each output element sums over the reduced dimension, the first
    operand's last one, but for ``addmm(c, a, b)`` (``a``'s: ``c`` is the bias; ``nn.Linear`` with one, ``ops.cpp``)
    and a convolution (its weight's window times its channels per group, the weight being ``(O, *window, C / groups)``
    in ``ops.cpp``'s ``conv_general``: a depthwise one sums over its window alone)."""
    arrays = list(_arrays(args))
    if base == "addmm" and len(arrays) >= 3:
        return 2 * out.size * arrays[1].shape[-1]
    if base in ("conv1d", "conv_general") and len(arrays) >= 2:
        return 2 * out.size * math.prod(arrays[1].shape[1:])
    return 2 * out.size * arrays[0].shape[-1]


def _record(t: Trace, name: str, args: tuple, kwargs: dict, out: Any) -> None:
    """Add the nodes of one intercepted call."""
    ins = [t.node(a) for a in (*_arrays(args), *_arrays(list(kwargs.values())))]
    outs = list(_arrays(out))
    if not outs:
        return
    base = name.split(".")[-1]
    if name == "fast.scaled_dot_product_attention":
        _sdpa(t, args, kwargs, ins, outs[0])
        return
    if base == "conv1d" and t.cpu and _conv1d_cpu(t, args, kwargs, ins, outs[0]):
        return
    if name in GPU_DONATING:
        _gpu_donating(t, base, _arrays_first(args), ins, outs[0], _rope_dims(args, kwargs) if base == "rope" else 0)
        return
    if base in RESHAPES and ins:
        x = _arrays_first(args)
        strides = reshape_strides(x.shape, t.strides(ins[0], x.shape), outs[0].shape)
        if strides is None:  # no strides express it: MLX copies
            t.op("Reshape", ins[:1], outs[0])
        else:
            t.view(ins[0], outs[0], strides)
        return
    if (base in VIEW_METHODS or base == "__getitem__" and _basic(args)) and ins:
        x = _arrays_first(args)
        found = view_strides(x.shape, t.strides(ins[0], x.shape), base, args[1:], kwargs, [o.shape for o in outs])
        for i, o in enumerate(outs):
            t.view(ins[0], o, found[i] if found else row_major(o.shape))
        return
    if base == "__getitem__" and ins:
        t.op("Gather", ins, outs[0])
        return
    if (base == "astype" and ins and outs[0].dtype == args[0].dtype) or base == "stop_gradient":
        t.bind(outs[0], ins[0])  # the input itself (StopGradient shares its buffer and strides)
        return
    if base in MATMUL_OPS and len(ins) == 2:
        _matmul(t, args, ins, outs[0])
        return
    strides = None
    elementwise = base in ELEMENTWISE
    if elementwise or base in LAYOUT_KEEPING:  # broadcast operands: a Broadcast node where the shape differs
        arrays = [*_arrays(args), *_arrays(list(kwargs.values()))]
        operands = [(outs[0].shape, broadcast_strides(a.shape, t.strides(i, a.shape), outs[0].shape))
                    for a, i in zip(arrays, ins)]
        if elementwise:  # binary.cpp / ops.cpp: operands cast to the result type first (a bool condition stays)
            ins = [t.internal("AsType", [i], a.shape, outs[0].dtype)
                   if a.dtype != outs[0].dtype and a.dtype != mx.bool_ and a.size > 1 else i
                   for i, a in zip(ins, arrays)]
            ins = [t.graph.view("Broadcast", i) if a.shape != outs[0].shape else i for i, a in zip(ins, arrays)]
        if any(isinstance(x, (int, float)) and not isinstance(x, bool) for x in args):  # a Python scalar
            ins.append(t.graph.view("Broadcast", t.graph.scalar(outs[0].dtype.size)))
        strides = elementwise_strides(outs[0].shape, operands)
    if base == "softmax" and ins:  # keeps a dense input's strides if its last is 1, else copies it row-major
        x = _arrays_first(args)
        st = t.strides(ins[0], x.shape)
        strides = st if dense(x.shape, st) and st[-1:] in ((1,), ()) else None
    flops = _matmul_flops(base, args, outs[0]) if base in MATMULS else 0
    donors = tuple(range(len(ins))) if elementwise else ()
    bits = (kwargs.get("bits") or 4) if base == "quantized_matmul" else None  # mx.quantized_matmul's default: 4
    ids = [t.op(base, ins, o, donors, flops, strides if len(outs) == 1 else None, bits=bits) for o in outs]
    if len(ids) > 1:
        for i in ids:
            t.graph.arrays[i].siblings = [j for j in ids if j != i]
    if base == "addmm":
        _float32_gemm(t, ids[0], outs[0], batched=len(args) > 2 and args[2].ndim > 2)


GPU_DONATING = frozenset({"fast.rms_norm", "fast.layer_norm", "fast.rope"})
"""A GPU's fast norms and RoPE (the CPU runs their fallback graphs): one kernel whose output takes its input's
buffer when that is donatable, and else a new one with its strides."""


def _rope_dims(args: tuple, kwargs: dict) -> int:
    """``mx.fast.rope``'s rotated dimensions (``dims``, its second argument)."""
    return int(kwargs.get("dims", args[1] if len(args) > 1 else 0))


def _shared(t: Trace, n: int) -> bool:
    """Whether node ``n`` is a view of a buffer another view reads too (``mx.split``'s parts): MLX can donate none
    of them (``array::is_donatable``: its data has other owners)."""
    arrays = t.graph.arrays
    while arrays[n].is_view and arrays[n].inputs:
        n = arrays[n].inputs[0]
        if t.view_readers.get(n, 0) > 1:
            return True
    return False


def _gpu_donating(t: Trace, base: str, x: mx.array, ins: list[int], out: mx.array, rope_dims: int = 0) -> None:
    """A GPU norm or RoPE (``RMSNorm::eval_gpu``, ``LayerNorm::eval_gpu``, ``RoPE::eval_gpu``, ``backend/cuda``;
    Metal's differ in detail, unmeasured): the output shares ``x``'s buffer where ``x`` is donatable, else it is
    allocated with ``x``'s strides. A norm reads rows whose last two strides are packed, else it copies ``x``
    row-major first (``contiguous_copy_gpu``) and writes into the copy. RoPE copies an input of more than 4
    dimensions that is not row-contiguous; CUDA's sizes a new buffer by its input's ``data_size()``, and a slice of
    a fused projection (Phi-3's ``qkv_proj``) spans nearly the whole projection."""
    st = t.strides(ins[0], x.shape)
    if base == "rope":
        kept = x.ndim <= 4 or row_contiguous(x.shape, st)
    else:
        kept = dense(x.shape, st) and st[-1:] in ((1,), ()) and (x.ndim < 2 or st[-2] in (0, x.shape[-1]))
    if kept and t.mlx_nodes and 0 < rope_dims < x.shape[-1] and _shared(t, ins[0]):
        # a partial rotation of an input it cannot donate: copied whole into the output, rotated there (rope.cu)
        t.op(base, ins, out, strides=row_major(x.shape), kernels=2)
        return
    if not kept:
        ins = [t.internal("Copy", [ins[0]], x.shape, x.dtype, inline=True), *ins[1:]]
        st = row_major(x.shape)
    extent = span(x.shape, st) if base == "rope" and t.cuda else None  # Metal's: out.nbytes()
    t.op(base, ins, out, donors=(0,), strides=st, nbytes=None if extent is None else extent * x.dtype.size)


def _float32_gemm(t: Trace, n: int, out: mx.array, batched: bool) -> None:
    """Mark node ``n`` where the CUDA host waits for its command buffer: a float32 GEMM over one matrix (a
    linear layer's weight). Measured, not read in MLX's source: float32 models' prefill chunks end with the
    host level with the device and peak near kvsim's floor, their bfloat16 casts run ahead
    (``data/generation/mlx-cuda-0.32.4/kernels/chunk-timing-dtype.jsonl``); phi-2's batched float32 attention
    products do not pace it, nor does a synthetic chain of large float32 GEMMs (``kernels/graph-pacing.jsonl``),
    so the rule is what those models share, not a mechanism (``docs/generation.md``, "CUDA: MLX's command
    buffers")."""
    if t.cuda and out.dtype == mx.float32 and not batched:
        t.graph.arrays[n].waits = True


LAYOUT_KEEPING = frozenset({"astype", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__invert__",
                            "greater", "greater_equal", "less", "less_equal", "equal", "not_equal", "logical_not",
                            "floor", "ceil", "round"})
"""Unary and binary ops outside ``ELEMENTWISE`` (no donation modelled) whose output keeps a dense input's strides."""
MATMUL_OPS = frozenset({"__matmul__", "matmul"})


def _basic(args: tuple) -> bool:
    index = args[1] if len(args) > 1 else None
    return not any(isinstance(i, mx.array) for i in (index if isinstance(index, tuple) else (index,)))


def _matmul(t: Trace, args: tuple, ins: list[int], out: mx.array) -> None:
    """``mx.matmul`` as ``ops.cpp`` builds it: operands cast to the result type (``AsType``), a 3-D or more
    ``a`` times a 2-D ``b`` as one GEMM over ``a`` flattened (a copy where no strides flatten it), else both
    broadcast over the batch; an operand whose last two dimensions are neither row- nor
    column-major is copied at its broadcast shape first (``check_transpose`` in ``backend/cpu/matmul.cpp``
    and ``backend/cuda/matmul.cpp`` alike), the copy held until the matmul's task completes."""
    a, b = args[0], args[1]
    g = t.graph
    shapes = [a.shape, b.shape]
    nodes, layouts = list(ins), [t.strides(ins[0], a.shape), t.strides(ins[1], b.shape)]
    for k, x in enumerate((a, b)):
        if x.dtype != out.dtype:  # type promotion: a unary AsType keeps a dense operand's strides
            nodes[k] = t.internal("AsType", [nodes[k]], x.shape, out.dtype)
            layouts[k] = layouts[k] if dense(x.shape, layouts[k]) else row_major(x.shape)
    flat = a.ndim > 2 and b.ndim <= 2
    if flat:
        rows = (math.prod(a.shape[:-1]), a.shape[-1])
        strides = reshape_strides(a.shape, layouts[0], rows)
        nodes[0] = t.internal("Reshape", [nodes[0]], rows, out.dtype) if strides is None \
            else g.view("Broadcast", nodes[0])
        shapes[0], layouts[0] = rows, strides or row_major(rows)
    elif a.ndim > 2 or b.ndim > 2:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        for k in (0, 1):
            full = (*batch, *shapes[k][-2:])
            if full != shapes[k]:
                layouts[k] = broadcast_strides(shapes[k], layouts[k], full)
                shapes[k], nodes[k] = full, g.view("Broadcast", nodes[k])
    held = []
    for k in (0, 1):
        if matmul_operand_copied(shapes[k], layouts[k]):
            if not t.mlx_nodes:  # inline, the copy's command buffer holds the operand until it completes
                held.append(nodes[k])
            # one dispatch on the CPU: the copy is the matmul's own (matmul_general), under the matmul's holder
            nodes[k] = t.internal("Copy", [nodes[k]], tuple(shapes[k]), out.dtype, kernels=0 if t.cpu else 1,
                                  inline=True)
            layouts[k] = row_major(tuple(shapes[k]))
    flops = 2 * out.size * a.shape[-1]
    n = t.op("Matmul", nodes + held, out, flops=flops, kernels=_gemm_kernels(t, shapes, layouts))
    _float32_gemm(t, n, out, batched=not flat and max(a.ndim, b.ndim) > 2)
    if flat:  # unflatten: a view of the GEMM's rows
        t.bind(out, g.view("Broadcast", n), row_major(out.shape))


def _gemm_kernels(t: Trace, shapes: list[tuple[int, ...]], layouts: list[Strides]) -> int:
    """A matmul's dispatches: two on CUDA where cuBLAS runs over per-batch pointers a kernel writes first
    (``gemm_pointer_batched``), else one."""
    return 1 + (t.cuda and t.mlx_nodes and
                gemm_pointer_batched(tuple(shapes[0]), layouts[0], tuple(shapes[1]), layouts[1]))


def _fallback_gemm_kernels(t: Trace, q: mx.array, k: mx.array, v: mx.array, kn: int, vn: int) -> tuple[int, int]:
    """The dispatches of the fallback attention's two products as ``mlx/fast.cpp`` builds them: grouped queries
    unflattened to ``(batch, kv heads, repeats, rows, dim)`` against keys and values broadcast over the repeats."""
    b, hq, lq, d = q.shape
    hk, lk, dv = k.shape[1], k.shape[2], v.shape[3]
    rep = hq // hk
    ks, vs = t.strides(kn, k.shape), t.strides(vn, v.shape)
    if rep > 1:
        ks, vs = (ks[0], ks[1], 0, ks[2], ks[3]), (vs[0], vs[1], 0, vs[2], vs[3])
        q_shape, batch = (b, hk, rep, lq, d), (b, hk, rep)
    else:
        q_shape, batch = (b, hq, lq, d), (b, hq)
    key_t = (*batch, d, lk), (*ks[:-2], ks[-1], ks[-2])
    scores = _gemm_kernels(t, [q_shape, key_t[0]], [row_major(q_shape), key_t[1]])
    probs = (*batch, lq, lk)
    return scores, _gemm_kernels(t, [probs, (*batch, lk, dv)], [row_major(probs), vs])


def _sdpa(t: Trace, args: tuple, kwargs: dict, ins: list[int], out: mx.array) -> None:
    """``mx.fast.scaled_dot_product_attention``: one node where the backend has a kernel, else MLX's
    fallback graph (``mlx/fast.cpp``), whose scores and probabilities are the large transients."""
    q, k, v = args[:3]
    b, hq, lq, d = q.shape
    lk = k.shape[2]
    isz = q.dtype.size
    mask = kwargs.get("mask", args[5] if len(args) > 5 else None)
    if fused_attention(t.sdpa_kernels, lq, lk, d, isz):
        t.op("ScaledDotProductAttention", ins, out, flops=_attention_flops(q.shape, lk, mask)
             if "ScaledDotProductAttention" in t.kernel_bytes_per_flop else 0,
             strides=same_layout(out.shape, t.strides(ins[0], q.shape)) if t.cuda else None)  # heads come back as rows
        return
    g = t.graph
    qn, kn, vn = ins[:3]
    scores_kernels, out_kernels = _fallback_gemm_kernels(t, q, k, v, kn, vn)
    scaled = g.op("Multiply", [g.view("Broadcast", g.scalar(isz)), qn], q.nbytes, donors=(1,))
    scores_bytes = b * hq * lq * lk * isz
    flops = 2 * b * hq * lq * lk * d  # each of q @ k.T and p @ v: timed by it where an op's time is a roofline
    scores = g.op("Matmul", [scaled, g.view("Transpose", kn)], scores_bytes, kernels=scores_kernels,
                  work_bytes=int(max(scores_bytes + q.nbytes + k.nbytes, flops * t.bytes_per_flop))
                  if t.roofline else None)
    if isinstance(mask, str) or isinstance(mask, mx.array):
        if isinstance(mask, str):
            rows = g.view("Broadcast", g.op("Arange", [], lq * 4))
            cols = g.view("Broadcast", g.op("Arange", [], lk * 4))
            mask_node = g.op("GreaterEqual", [rows, cols], lq * lk)
        else:
            mask_node = t.node(mask)
        prim = "Select" if isinstance(mask, str) or mask.dtype == mx.bool_ else "Add"
        scores = g.op(prim, [mask_node, scores, g.view("Broadcast", g.scalar(isz))], scores_bytes, donors=(1,))
    probs = g.op("Softmax", [scores], scores_bytes, donors=(0,))
    t.bind(out, g.op("Matmul", [probs, vn], out.nbytes, kernels=out_kernels, work_bytes=int(max(
        out.nbytes + scores_bytes + v.nbytes, flops * t.bytes_per_flop)) if t.roofline else None))


def _attention_flops(q_shape: tuple[int, ...], k_rows: int, mask: Any) -> int:
    """A fused attention's arithmetic: ``q @ k.T`` and ``p @ v`` over the (query, key) pairs it computes; a
    causal call skips the pairs above the diagonal (cuDNN's causal mask, aligned lower right), an array mask
    skips none."""
    b, heads, q_rows, dim = q_shape
    pairs = q_rows * k_rows - (q_rows * (q_rows - 1) // 2 if isinstance(mask, str) and mask == "causal" else 0)
    return 4 * b * heads * pairs * dim


def _conv1d_cpu(t: Trace, args: tuple, kwargs: dict, ins: list[int], out: mx.array) -> bool:
    """``mx.conv1d`` on the CPU: ``explicit_gemm_conv_1D_cpu`` (``mlx/backend/cpu/conv.cpp``) pads the input
    into a float32 copy, unfolds it into a float32 ``(N * oH, wH * C)`` matrix, copies a grouped or non-float32
    weight to float32 and, for a non-float32 output, runs the GEMM into a float32 buffer copied into the output;
    every temporary lives until the convolution's task completes. Returns False for the other paths (dilation)."""
    x, w = args[0], args[1]
    params = dict(zip(("stride", "padding", "dilation", "groups"), args[2:6]), **kwargs)
    if params.get("dilation", 1) != 1:
        return False
    n, ih, c = x.shape
    o, wh, c_per_group = w.shape
    oh, pad = out.shape[1], params.get("padding", 0)
    f32 = mx.float32.size
    g = t.graph
    padded = g.op("ConvPad", [ins[0]], n * (ih + 2 * pad) * c * f32)
    unfolded = g.op("ConvUnfold", [padded], n * oh * wh * c * f32)
    temps = [padded, unfolded]
    weight = ins[1]
    if c != c_per_group or w.dtype != mx.float32:
        weight = g.op("ConvWeight", [ins[1]], o * wh * c_per_group * f32)
        temps.append(weight)
    if out.dtype != mx.float32:
        temps.append(g.op("Matmul", [unfolded, weight], out.size * f32))
    t.op("Convolution", [*ins[:2], *temps], out, flops=2 * out.size * wh * c_per_group)
    return True


def _wrap(t: Trace, name: str, fn: Callable) -> Callable:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if t.depth:  # an op called from inside another traced op is part of it
            return fn(*args, **kwargs)
        t.depth += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            t.depth -= 1
        _record(t, name, args, kwargs, out)
        return out

    return wrapped


def _wrap_compiled(t: Trace, fn: Callable, shapeless: bool = False) -> Callable:
    """An ``mx.compile``-d function, run eagerly (compile is off): MLX hands its Python function new
    objects for the arguments and returns a new object, so the arguments are matched to their nodes in
    order of shape and dtype, and the result is bound to the last op that made an array like it. The ops
    the outermost call recorded are then fused as MLX's ``compile_fuse`` fuses them (``_fuse_compiled``)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if t.depth:
            return fn(*args, **kwargs)
        ins = [a for a in (*_arrays(args), *_arrays(list(kwargs.values())))]
        arg_nodes = [t.node(a) for a in ins]
        outer = not t.pending_args  # a compiled function called inside another is traced into it
        key = repeats.call_key(t, fn, args, kwargs, arg_nodes) if outer else None
        repeat = t.repeated_calls.get(key)
        if repeat is not None:  # a call like an earlier one: its nodes copied (kvsim.generation.repeats)
            t.depth += 1
            try:
                out = repeats.results(repeat.skeleton)
            finally:
                t.depth -= 1
            repeats.copy(t, repeat, arg_nodes, list(_arrays(out)))
            return out
        t.pending_args.append([(n, a.shape, a.dtype) for n, a in zip(arg_nodes, ins)])
        start = len(t.graph.arrays)
        try:
            out = fn(*args, **kwargs)
        finally:
            t.pending_args.pop()
        outs = [t.node(o) for o in _arrays(out)]
        if outer:
            _fuse_compiled(t.graph, start, outs, shapeless)
            t.repeated_calls[key] = repeats.remember(t, start, arg_nodes, outs, out)
        return out

    return wrapped


FUSABLE = frozenset(ELEMENTWISE - {"softmax"}) | {
    "astype", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__and__", "__or__", "__invert__",
    "greater", "greater_equal", "less", "less_equal", "equal", "not_equal", "logical_not", "logical_and",
    "logical_or", "floor", "ceil", "round", "erf", "Broadcast"}
"""Primitives ``compile_fuse`` fuses (``is_fusable``, ``mlx/compile.cpp``: unary, binary, ``Select``,
``Broadcast``); a reduction, a matmul, a softmax or a reshape ends a fused section."""
MAX_COMPILE_DEPTH = 11  # mlx/compile.cpp max_compile_depth
MAX_COMPILE_ARRAYS = 24  # mlx/compile.cpp max_compile_arrays


def _fuse_compiled(g: StepGraph, start: int, outputs: list[int], shapeless: bool = False) -> None:
    """``compile_fuse`` over the nodes ``start:`` one compiled call recorded: walking back from the last,
    each non-broadcast fusable node takes in the fusable nodes it reads (at most 11 deep, 24 inputs) whose
    readers are all in the section; a section of two or more becomes one ``Compiled`` node in the root's
    place, reading the section's inputs, which it may donate (``compiled_allocate_outputs``). The nodes it
    absorbed are left unread. Shapeless, a binary op broadcasts its operands, so even one is a section
    (gemma-3's ``clip_residual``: MLX's CUDA graphs launch a fused ``Broadcast, Broadcast, Add`` kernel)."""
    arrays = g.arrays
    readers: dict[int, list[int]] = {}
    for n in range(start, len(arrays)):
        for i in arrays[n].inputs:
            readers.setdefault(i, []).append(n)
    done: set[int] = set()
    for root in range(len(arrays) - 1, start - 1, -1):
        if root in done or arrays[root].prim not in FUSABLE or arrays[root].prim == "Broadcast":
            continue
        section, inputs = _section(arrays, root, start, readers, done | set(outputs), shapeless)
        if len(section) <= 1 and not (shapeless and len(arrays[root].inputs) > 1):
            continue  # shapeless, a lone binary op is fused with the broadcasts of its operands
        done |= section
        a = arrays[root]
        a.prim, a.inputs, a.kernels, a.donors = "Compiled", inputs, 1, tuple(range(len(inputs)))
        a.work_bytes = a.nbytes + sum(arrays[i].nbytes for i in inputs)


def _section(arrays: list[Array], root: int, start: int, readers: dict[int, list[int]],
             closed: set[int], shapeless: bool) -> tuple[set[int], list[int]]:
    """The fused section ``compile_fuse``'s first pass grows from ``root`` and its inputs, in order: a node
    joins once every reader of it has joined (until then it is an input); ``closed`` nodes never join."""
    section: set[int] = set()
    inputs: dict[int, None] = {}  # insertion-ordered set

    def take(n: int, depth: int) -> None:
        if n in section:
            return
        a = arrays[n]
        joins = n >= start and a.prim in FUSABLE and depth < MAX_COMPILE_DEPTH and (n == root or n not in closed)
        if joins and depth and any(r not in section for r in readers.get(n, ())):
            joins = False
        if not joins or len(inputs) >= MAX_COMPILE_ARRAYS:
            inputs[n] = None
            return
        inputs.pop(n, None)
        section.add(n)
        for i in a.inputs:  # shapeless: a binary op broadcasts every operand (a Broadcast, one level deeper)
            take(i, depth + 1 + (shapeless and len(a.inputs) > 1 and arrays[i].prim != "Broadcast"))

    take(root, 0)
    return section, [i for i in inputs if i not in section]


def _wrap_setitem(t: Trace, fn: Callable) -> Callable:
    def setitem(a: mx.array, index: Any, value: Any) -> None:
        if t.depth:
            fn(a, index, value)
            return
        old = t.node(a)
        vin = [t.node(v) for v in _arrays(value)] + [t.node(i) for i in _arrays(index)]
        t.depth += 1
        try:
            fn(a, index, value)
        finally:
            t.depth -= 1
        if isinstance(value, mx.array) and _whole(a.shape, index):  # ops.cpp: the update itself, no SliceUpdate
            n, strides = vin[0], broadcast_strides(value.shape, t.strides(vin[0], value.shape), a.shape)
            if value.dtype != a.dtype:
                n = t.internal("AsType", [n], value.shape, a.dtype)
                strides = strides if dense(value.shape, strides) else row_major(a.shape)
            t.bind(a, n if value.shape == a.shape else t.graph.view("Broadcast", n), strides)
            return
        t.bind(a, t.graph.op("SliceUpdate", [old, *vin], a.nbytes, work_bytes=2 * a.nbytes, donors=(0,)),
               row_major(a.shape))

    return setitem


def _whole(shape: tuple[int, ...], index: Any) -> bool:
    """Whether a basic index selects all of an array of ``shape`` (``slice_update``'s short cut)."""
    parts = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, mx.array) or isinstance(i, slice) and (i.step or 1) < 0 for i in parts):
        return False  # a gather, or negative strides: MLX keeps the SliceUpdate
    base = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape, (0,) * len(shape))
    try:
        return base[index].shape == tuple(shape)
    except (IndexError, TypeError, ValueError):
        return False


def _shapeless(module: Any, name: str) -> bool:
    """Whether ``module.name`` was compiled ``shapeless=True``, read from its decorator (MLX keeps the flag
    inside the compiled object): shapeless tracing broadcasts every operand of a binary op, which deepens
    the graph ``compile_fuse`` walks (``x ** 3`` in ``gelu_approx`` falls past depth 11 into its own kernel)."""
    return _decorated_shapeless(module).get(name, False)


@functools.cache
def _decorated_shapeless(module: Any) -> dict[str, bool]:
    """Each decorated function of ``module``'s source (its first definition): whether a decorator says
    ``shapeless=True``. Read once per module, not at every ``tracing`` (88 compiled functions: 9 ms)."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return {}
    found: dict[str, bool] = {}
    for m in re.finditer(r"((?:^@.*\n)+)def (\w+)\(", source, re.MULTILINE):
        found.setdefault(m.group(2), "shapeless=True" in m.group(1))
    return found


def _gpu_sdpa(t: Trace, recorded: Callable) -> Callable:
    """A GPU's ``mx.fast.scaled_dot_product_attention``: one node where its fused kernel serves the call,
    else MLX's fallback graph op by op (``fallbacks``). CUDA runs attention with sinks and an array mask
    unfused: gpt-oss-20b's sliding-window layers allocate 1.04 GB evaluating the call alone at 2,000 tokens
    (two 512 MB score arrays), its causal layers 16 MB, the output (``kernels/op-bytes-gpt-oss.jsonl``)."""

    def sdpa(q: mx.array, k: mx.array, v: mx.array, **kwargs: Any) -> Any:
        sinks = kwargs.get("sinks") is not None and t.cuda and isinstance(kwargs.get("mask"), mx.array)
        if not sinks and fused_attention(t.sdpa_kernels, q.shape[2], k.shape[2], q.shape[3], q.dtype.size):
            return recorded(q, k, v, **kwargs)
        scores_bytes = math.prod(q.shape[:3]) * k.shape[2] * max(q.dtype.size, k.dtype.size)
        t.unfused_attention_bytes = max(t.unfused_attention_bytes, scores_bytes)
        return fallbacks.scaled_dot_product_attention(q, k, v, **kwargs)

    return sdpa


def _cpu_dequantize(recorded: Callable) -> Callable:
    def dequantize(*args: Any, **kwargs: Any) -> Any:
        mode = kwargs.get("mode", args[5] if len(args) > 5 else "affine")
        return (fallbacks.dequantize if mode == "affine" else recorded)(*args, **kwargs)

    return dequantize


@contextlib.contextmanager
def patching() -> Iterator[Callable[[Any, str, Any], None]]:
    """Yield ``patch(owner, attr, new)``, which sets ``owner.attr``; on leaving the block every patched attribute
    gets its old value back, the last patched first. ``mx.compile`` is off meanwhile."""
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, attr: str, new: Any) -> None:
        saved.append((owner, attr, owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)))
        setattr(owner, attr, new)

    mx.disable_compile()
    try:
        yield patch
    finally:
        mx.enable_compile()
        for owner, attr, old in reversed(saved):
            setattr(owner, attr, old)


def patch_array_ops(patch: Callable[[Any, str, Any], None], wrap: Callable[[str, Callable], Callable]) -> None:
    """Through ``patch`` (``patching``), replace each function of ``MX_FUNCTIONS`` that ``mx`` has and each method
    of ``METHODS`` that ``mx.array`` has (a property through its getter) by ``wrap(name, original)``."""
    for name in MX_FUNCTIONS:
        if hasattr(mx, name):
            patch(mx, name, wrap(name, getattr(mx, name)))
    for name in METHODS:
        attr = mx.array.__dict__.get(name)
        if attr is not None:
            patch(mx.array, name, property(wrap(name, attr.fget)) if isinstance(attr, property) else wrap(name, attr))


@contextlib.contextmanager
def tracing(sdpa_kernels: str = "fallback", bytes_per_flop: float = 0.0, cpu: bool = False,
            kernel_bytes_per_flop: Iterable[tuple[str, float]] = (),
            kernel_call_bytes: Iterable[tuple[str, float]] = (), roofline: bool = False,
            mlx_nodes: bool = False) -> Iterator[Trace]:
    """Record every array op made inside the block; ``mx.compile`` is off meanwhile. ``cpu``: ops follow the
    CPU backend's implementations where they allocate temporaries (convolutions); ``mlx_nodes``: ``Trace.mlx_nodes``."""
    t = Trace(sdpa_kernels, bytes_per_flop, cpu=cpu, kernel_bytes_per_flop=dict(kernel_bytes_per_flop),
              kernel_call_bytes=dict(kernel_call_bytes), roofline=roofline, mlx_nodes=mlx_nodes)
    with patching() as patch:
        patch_array_ops(patch, lambda name, fn: _wrap(t, name, fn))
        if cpu:  # the CPU has no Quantize primitive for affine dequantization: MLX builds the fallback graph
            patch(mx, "dequantize", _cpu_dequantize(mx.dequantize))
        for name in FAST_FUNCTIONS:
            if sdpa_kernels == "fallback":  # no kernel on this backend: MLX builds the fallback graph
                patch(mx.fast, name, getattr(fallbacks, name))
            elif name == "scaled_dot_product_attention":
                patch(mx.fast, name, _gpu_sdpa(t, _wrap(t, f"fast.{name}", getattr(mx.fast, name))))
            else:
                patch(mx.fast, name, _wrap(t, f"fast.{name}", getattr(mx.fast, name)))
        patch(mx.array, "__setitem__", _wrap_setitem(t, mx.array.__dict__["__setitem__"]))

        def evaluate(*args: Any) -> None:  # the playback stands in for evaluation: nothing is computed
            if t.on_eval is not None:
                t.on_eval(list(_arrays(args)))

        compiled = [(module, attr, value) for name, module in list(sys.modules.items())
                    if name.startswith(COMPILED_MODULES) and module
                    for attr, value in list(vars(module).items()) if type(value).__name__ == "_gc_func"]
        shapeless = {id(v) for module, attr, v in compiled if _shapeless(module, attr)}  # where it is defined
        for module, attr, value in compiled:
            patch(module, attr, _wrap_compiled(t, value, id(value) in shapeless))
        patch(mx, "eval", evaluate)
        patch(mx, "async_eval", evaluate)
        patch(mx.array, "item", lambda a: (evaluate(a), 0)[1])
        patch(mx.array, "tolist", lambda a: (evaluate(a), [0] * a.size if a.ndim else 0)[1])
        yield t


@dataclass(frozen=True, slots=True)
class EvalGraph:
    """What one eval runs and the buffers it starts with."""

    graph: StepGraph
    """The nodes to compute, renumbered; earlier results are leaves."""
    leaf_buffers: dict[int, int]
    """Local leaf -> the global node owning its buffer (a view's source), for leaves that hold memory."""
    buffer_bytes: dict[int, int]
    """Global buffer owner -> bytes, for every buffer alive when the eval starts (reached or held)."""


def root(t: Trace, n: int) -> int:
    """The node whose buffer ``n`` shares (itself unless ``n`` is a view)."""
    arrays = t.graph.arrays
    while arrays[n].is_view and arrays[n].inputs:
        n = arrays[n].inputs[0]
    return n


def elements(t: Trace, n: int) -> int:
    """What MLX counts of node ``n`` toward a CUDA command buffer's limit: its elements (``data_size()``,
    backend/cuda/device.cpp ``set_input_array``), weights' included; -1 where the trace has no shape."""
    leaf = t.leaf_arrays.get(n)
    if leaf is not None:
        return leaf.size
    own, strides = t.shapes.get(n), t.layout.get(n)
    extent = span(own[0], strides) if own is not None and strides is not None else None
    if extent is not None:  # a slice spans from its first element to its last (its data_size)
        return extent
    shape = own or t.shapes.get(root(t, n))  # a broadcast MLX reads as its source's data
    return math.prod(shape[0]) if shape is not None else -1


def subgraph(t: Trace, outputs: list[mx.array], held: list[mx.array]) -> EvalGraph:
    """The graph one eval runs: nodes not yet evaluated that ``outputs`` reach, in creation order, with
    earlier results as leaves holding their buffers; marks the nodes evaluated. ``held`` are the arrays
    Python keeps after the eval (the caches' state): they are ``py_held``, and their buffers count from
    the start even where this eval does not read them."""
    arrays = t.graph.arrays
    out_nodes = [t.node(o) for o in outputs]
    held_nodes = {t.node(a) for a in held} | set(out_nodes)
    reach: set[int] = set()
    stack = list(out_nodes)
    while stack:
        n = stack.pop()
        if n in reach:
            continue
        reach.add(n)
        if n not in t.evaluated and arrays[n].prim:
            stack.extend(arrays[n].inputs)
            stack.extend(arrays[n].siblings)
    local = StepGraph()
    index: dict[int, int] = {}
    leaf_buffers: dict[int, int] = {}
    buffer_bytes: dict[int, int] = {}
    for n in sorted(reach):
        a = arrays[n]
        if n in t.evaluated or not a.prim:
            index[n] = local.leaf(0, -1, py_held=n in held_nodes)
            local.arrays[index[n]].elements = elements(t, n)
            if n in t.evaluated:
                r = root(t, n)
                leaf_buffers[index[n]] = r
                buffer_bytes[r] = arrays[r].nbytes
            continue
        index[n] = len(local.arrays)
        work = max(a.work_bytes, a.nbytes + sum(arrays[i].nbytes for i in a.inputs)) if t.roofline and a.kernels \
            else a.work_bytes  # a roofline's bytes: every kernel's reads and writes
        local.arrays.append(Array(a.nbytes, a.prim, [index[i] for i in a.inputs], a.kernels, work,
                                  a.donors, n in held_nodes, eager=a.eager, elements=elements(t, n),
                                  waits=a.waits, fenced=a.fenced, inline=a.inline))
    for n in reach:
        if arrays[n].siblings and n in index:
            local.arrays[index[n]].siblings = [index[s] for s in arrays[n].siblings if s in index]
    for n in held_nodes:  # held results this eval does not read still occupy memory
        if n in t.evaluated and n not in reach:
            buffer_bytes.setdefault(root(t, n), arrays[root(t, n)].nbytes)
    local.outputs = [index[n] for n in out_nodes]
    t.evaluated |= reach
    return EvalGraph(local, leaf_buffers, buffer_bytes)


__all__ = ["EvalGraph", "Trace", "subgraph", "tracing"]
