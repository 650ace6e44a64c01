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
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from kvsim.generation import fallbacks
from kvsim.sim.attention import fused_attention
from kvsim.sim.graph import Array, StepGraph

VIEW_METHODS = frozenset({"transpose", "swapaxes", "moveaxis", "T", "mT", "squeeze", "expand_dims",
                          "broadcast_to", "view", "split", "diagonal", "as_strided"})
STRIDE_VIEWS = frozenset({"split", "squeeze", "expand_dims", "view"})
"""Views whose strides a later ``Reshape`` still expresses without a copy (``prepare_reshape``)."""
RESHAPES = frozenset({"reshape", "flatten", "unflatten"})
ELEMENTWISE = frozenset({
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__neg__", "__pow__", "__rpow__", "__abs__", "add", "subtract", "multiply", "divide", "maximum",
    "minimum", "where", "exp", "sigmoid", "tanh", "negative", "square", "rsqrt", "sqrt", "erf", "log", "abs",
    "power", "softmax", "clip", "log1p", "expm1", "sin", "cos", "logaddexp", "reciprocal", "softplus", "sign",
})
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
    "cumsum", "sigmoid", "round", "T", "mT",
)


@dataclass(slots=True)
class Trace:
    """The graph of one step and the bookkeeping that maps Python arrays to its nodes."""

    sdpa_kernels: str = "fallback"
    bytes_per_flop: float = 0.0
    """Device time of a matmul's arithmetic, as the bytes the profile's time model would move meanwhile."""
    graph: StepGraph = field(default_factory=StepGraph)
    node_of: dict[int, int] = field(default_factory=dict)  # id(mx.array) -> node
    contiguous: dict[int, bool] = field(default_factory=dict)  # node -> a Reshape of it is a view
    keep: list[Any] = field(default_factory=list)  # every array seen, so ids are never reused
    leaf_arrays: dict[int, Any] = field(default_factory=dict)  # node -> the leaf array
    evaluated: set[int] = field(default_factory=set)  # nodes an earlier eval computed
    known_leaves: set[int] = field(default_factory=set)  # id() of arrays that are leaves (parameters)
    shapes: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # node -> (shape, dtype) of its array
    pending_args: list[list[tuple[int, Any, Any]]] = field(default_factory=list)  # compiled calls running
    on_eval: Callable[[list[Any]], None] | None = None  # called by mx.eval / mx.async_eval
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
            self.contiguous[n] = True
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

    def evaluated_leaf(self, a: mx.array) -> int:
        """Register ``a`` as an evaluated array holding its own buffer (a cache advanced untraced)."""
        n = self.node_of.get(id(a))
        if n is None or n not in self.evaluated:
            n = self.graph.leaf(a.nbytes, -1, py_held=False)
            self.bind(a, n)
            self.evaluated.add(n)
        return n

    def bind(self, a: mx.array, n: int, contiguous: bool = True) -> int:
        self.node_of[id(a)] = n
        self.shapes.setdefault(n, (a.shape, a.dtype))
        self.contiguous[n] = contiguous
        self.keep.append(a)
        return n

    def op(self, prim: str, inputs: list[int], out: mx.array, donors: tuple[int, ...] = (), flops: int = 0) -> int:
        moved = out.nbytes + sum(self.graph.arrays[i].nbytes for i in inputs)
        if flops and math.isfinite(self.bytes_per_flop):
            moved += int(flops * self.bytes_per_flop)
        n = self.graph.op(prim, inputs, out.nbytes, work_bytes=moved, donors=donors)
        return self.bind(out, n)

    def view(self, src: int, out: mx.array, contiguous: bool) -> int:
        return self.bind(out, self.graph.view("Transpose", src), contiguous)


def _arrays(x: Any) -> Iterator[mx.array]:
    if isinstance(x, mx.array):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _arrays(y)


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
    if base in RESHAPES and ins:
        if t.contiguous.get(ins[0], True):
            t.view(ins[0], outs[0], True)
        else:
            t.op("Reshape", ins[:1], outs[0])
        return
    if base in VIEW_METHODS and ins:
        keeps = base in STRIDE_VIEWS  # MLX reshapes a slice or a split as a view; a permutation it copies
        for o in outs:
            t.view(ins[0], o, keeps and t.contiguous.get(ins[0], True))
        return
    if base == "__getitem__" and ins:
        index = args[1] if len(args) > 1 else None
        basic = not any(isinstance(i, mx.array) for i in (index if isinstance(index, tuple) else (index,)))
        if basic:
            t.view(ins[0], outs[0], t.contiguous.get(ins[0], True))
        else:
            t.op("Gather", ins, outs[0])
        return
    if base == "astype" and ins and outs[0].dtype == args[0].dtype:
        t.bind(outs[0], ins[0], t.contiguous.get(ins[0], True))
        return
    elementwise = base in ELEMENTWISE
    if elementwise:  # MLX broadcasts each operand to the output's shape: a Broadcast node where it differs
        shapes = [a.shape for a in (*_arrays(args), *_arrays(list(kwargs.values())))]
        ins = [t.graph.view("Broadcast", i) if shape != outs[0].shape else i for i, shape in zip(ins, shapes)]
        if any(isinstance(x, (int, float)) and not isinstance(x, bool) for x in args):  # a Python scalar
            ins.append(t.graph.view("Broadcast", t.graph.scalar(outs[0].dtype.size)))
    flops = 2 * outs[0].size * _arrays_first(args).shape[-1] if base in MATMULS else 0
    if base in ("__matmul__", "matmul") and len(ins) == 2 and args[0].ndim > 2 and args[1].ndim == 2:
        ins[0] = t.graph.view("Broadcast", ins[0])  # matmul flattens the batch dims (a Flatten view) ...
        t.bind(outs[0], t.graph.view("Broadcast", t.op("Matmul", ins, outs[0], flops=flops)))  # ... and unflattens
        return
    donors = tuple(range(len(ins))) if elementwise else ()
    ids = [t.op(base, ins, o, donors, flops) for o in outs]
    if len(ids) > 1:
        for i in ids:
            t.graph.arrays[i].siblings = [j for j in ids if j != i]


def _sdpa(t: Trace, args: tuple, kwargs: dict, ins: list[int], out: mx.array) -> None:
    """``mx.fast.scaled_dot_product_attention``: one node where the backend has a kernel, else MLX's
    fallback graph (``mlx/fast.cpp``), whose scores and probabilities are the large transients."""
    q, k, v = args[:3]
    b, hq, lq, d = q.shape
    lk = k.shape[2]
    isz = q.dtype.size
    if fused_attention(t.sdpa_kernels, lq, lk, d, isz):
        t.op("ScaledDotProductAttention", ins, out)
        return
    g = t.graph
    qn, kn, vn = ins[:3]
    scaled = g.op("Multiply", [g.view("Broadcast", g.scalar(isz)), qn], q.nbytes, donors=(1,))
    scores_bytes = b * hq * lq * lk * isz
    scores = g.op("Matmul", [scaled, g.view("Transpose", kn)], scores_bytes)
    mask = kwargs.get("mask", args[5] if len(args) > 5 else None)
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
    t.bind(out, g.op("Matmul", [probs, vn], out.nbytes))


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


def _wrap_compiled(t: Trace, fn: Callable) -> Callable:
    """An ``mx.compile``-d function, run eagerly (compile is off): MLX hands its Python function new
    objects for the arguments and returns a new object, so the arguments are matched to their nodes in
    order of shape and dtype, and the result is bound to the last op that made an array like it."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if t.depth:
            return fn(*args, **kwargs)
        ins = [a for a in (*_arrays(args), *_arrays(list(kwargs.values())))]
        t.pending_args.append([(t.node(a), a.shape, a.dtype) for a in ins])
        try:
            out = fn(*args, **kwargs)
        finally:
            t.pending_args.pop()
        for o in _arrays(out):
            t.node(o)
        return out

    return wrapped


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
        t.bind(a, t.graph.op("SliceUpdate", [old, *vin], a.nbytes, work_bytes=2 * a.nbytes, donors=(0,)))

    return setitem


@contextlib.contextmanager
def tracing(sdpa_kernels: str = "fallback", bytes_per_flop: float = 0.0) -> Iterator[Trace]:
    """Record every array op made inside the block; ``mx.compile`` is off meanwhile."""
    t = Trace(sdpa_kernels, bytes_per_flop)
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, attr: str, new: Any) -> None:
        saved.append((owner, attr, owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)))
        setattr(owner, attr, new)

    for name in MX_FUNCTIONS:
        if hasattr(mx, name):
            patch(mx, name, _wrap(t, name, getattr(mx, name)))
    for name in FAST_FUNCTIONS:
        if sdpa_kernels == "fallback":  # no kernel on this backend: MLX builds the fallback graph
            patch(mx.fast, name, getattr(fallbacks, name))
        else:
            patch(mx.fast, name, _wrap(t, f"fast.{name}", getattr(mx.fast, name)))
    for name in METHODS:
        attr = mx.array.__dict__.get(name)
        if attr is None:
            continue
        if isinstance(attr, property):
            getter = _wrap(t, name, attr.fget)
            patch(mx.array, name, property(getter))
        else:
            patch(mx.array, name, _wrap(t, name, attr))
    patch(mx.array, "__setitem__", _wrap_setitem(t, mx.array.__dict__["__setitem__"]))

    def evaluate(*args: Any) -> None:  # the playback stands in for evaluation: nothing is computed
        if t.on_eval is not None:
            t.on_eval(list(_arrays(args)))

    for module in [m for name, m in list(sys.modules.items()) if name.startswith(COMPILED_MODULES) and m]:
        for attr, value in list(vars(module).items()):
            if type(value).__name__ == "_gc_func":
                patch(module, attr, _wrap_compiled(t, value))
    patch(mx, "eval", evaluate)
    patch(mx, "async_eval", evaluate)
    patch(mx.array, "item", lambda a: (evaluate(a), 0)[1])
    patch(mx.array, "tolist", lambda a: (evaluate(a), [0] * a.size if a.ndim else 0)[1])
    mx.disable_compile()
    try:
        yield t
    finally:
        mx.enable_compile()
        for owner, attr, old in reversed(saved):
            setattr(owner, attr, old)


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
            if n in t.evaluated:
                r = root(t, n)
                leaf_buffers[index[n]] = r
                buffer_bytes[r] = arrays[r].nbytes
            continue
        index[n] = len(local.arrays)
        local.arrays.append(Array(a.nbytes, a.prim, [index[i] for i in a.inputs], a.kernels, a.work_bytes,
                                  a.donors, n in held_nodes, eager=a.eager))
    for n in reach:
        if arrays[n].siblings and n in index:
            local.arrays[index[n]].siblings = [index[s] for s in arrays[n].siblings if s in index]
    for n in held_nodes:  # held results this eval does not read still occupy memory
        if n in t.evaluated and n not in reach:
            buffer_bytes.setdefault(root(t, n), arrays[root(t, n)].nbytes)
    local.outputs = [index[n] for n in out_nodes]
    t.evaluated |= reach
    return EvalGraph(local, leaf_buffers, buffer_bytes)


__all__ = ["Trace", "subgraph", "tracing"]
