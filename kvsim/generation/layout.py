"""The strides MLX gives each array of a traced step, and the copies they cause.

MLX keeps views (transposes, slices, broadcasts, splits, most reshapes) as strides over their input's buffer,
and an element-wise op on a dense input keeps the input's strides (``set_unary_output_data``,
``set_binary_op_output_data``, ``mlx/backend/common``). Some primitives then copy an input whose strides they
cannot read: a ``Reshape`` that no strides express (``prepare_reshape``, ``backend/common/common.cpp``), and a CPU
``Matmul`` operand whose last two dimensions are neither row- nor column-major (``check_transpose``,
``backend/cpu/matmul.cpp``: a copy at the operand's broadcast shape, held until the task completes). Strides are
in elements; a view's are computed by numpy on a zero-copy stand-in (``as_strided``), whose basic indexing,
transposes, splits and broadcasts follow the same rules.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

Strides = tuple[int, ...]


def row_major(shape: tuple[int, ...]) -> Strides:
    """Strides of a fresh row-contiguous array."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def row_contiguous(shape: tuple[int, ...], strides: Strides) -> bool:
    """MLX's ``flags.row_contiguous`` (size-1 dimensions ignored)."""
    step = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != step:
                return False
            step *= n
    return True


def col_contiguous(shape: tuple[int, ...], strides: Strides) -> bool:
    """MLX's ``flags.col_contiguous``."""
    return row_contiguous(shape[::-1], strides[::-1])


def same_layout(shape: tuple[int, ...], like: Strides) -> Strides:
    """Strides packing ``shape`` in the order of ``like``'s strides, smallest first (a zero stride counts as 1):
    CUDA attention's output for queries of strides ``like`` (``malloc_with_same_layout``,
    ``backend/cuda/scaled_dot_product_attention.cpp``)."""
    out, step = [0] * len(shape), 1
    for i in sorted(range(len(shape)), key=lambda i: like[i] if like[i] > 0 else 1):
        out[i] = step
        step *= shape[i]
    return tuple(out)


@functools.lru_cache(maxsize=4096)  # a recurrence's token loop asks the same few millions of times
def span(shape: tuple[int, ...], strides: Strides) -> int | None:
    """MLX's ``data_size()`` of an array with these strides: the elements from its first to its last, as
    ``slice`` computes it (``backend/common/slicing.cpp``); ``None`` for a broadcast (a zero stride), which keeps
    its source's."""
    if any(n > 1 and s == 0 for n, s in zip(shape, strides)):
        return None
    return 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides) if n > 1) if all(shape) else 0


def dense(shape: tuple[int, ...], strides: Strides) -> bool:
    """MLX's ``flags.contiguous``: the elements fill their span with no gap or repeat (a permutation of a
    row-contiguous array), as a transpose of a fresh array is; a broadcast or a strided slice is not."""
    dims = sorted((s, n) for n, s in zip(shape, strides) if n != 1)
    step = 1
    for s, n in dims:
        if s != step:
            return False
        step *= n
    return True


def view_strides(shape: tuple[int, ...], strides: Strides, method: str, args: tuple, kwargs: dict,
                 out_shapes: list[tuple[int, ...]]) -> list[Strides] | None:
    """The strides of the views ``method`` makes of an array (``None``: not a view numpy can follow)."""
    base = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape, strides)
    try:
        views = _numpy_views(base, method, args, kwargs)
    except (TypeError, ValueError, IndexError):
        return None
    if views is None or [v.shape for v in views] != [tuple(s) for s in out_shapes]:
        return None
    return [tuple(int(s) for s in v.strides) for v in views]


def _numpy_views(base: np.ndarray, method: str, args: tuple, kwargs: dict) -> list[np.ndarray] | None:
    arg = args[0] if args else None
    if method == "__getitem__":
        return [base[_numpy_index(arg)]]
    if method in ("T",):
        return [base.T]
    if method == "mT":
        return [np.swapaxes(base, -1, -2)]
    if method == "transpose":
        axes = kwargs.get("axes", args[0] if len(args) == 1 and isinstance(arg, (list, tuple)) else args or None)
        return [np.transpose(base, axes)]
    if method == "swapaxes":
        return [np.swapaxes(base, *args[:2])]
    if method == "moveaxis":
        return [np.moveaxis(base, *args[:2])]
    if method == "squeeze":
        axis = kwargs.get("axis", arg)
        return [np.squeeze(base, tuple(axis) if isinstance(axis, list) else axis)]
    if method == "expand_dims":
        axis = kwargs.get("axis", arg)
        return [np.expand_dims(base, tuple(axis) if isinstance(axis, list) else axis)]
    if method == "broadcast_to":
        return [np.broadcast_to(base, tuple(kwargs.get("shape", arg)))]
    if method == "split":
        parts = kwargs.get("indices_or_sections", arg)
        axis = kwargs.get("axis", args[1] if len(args) > 1 else 0)
        return np.split(base, list(parts) if isinstance(parts, (list, tuple)) else parts, axis=axis)
    return None


def _numpy_index(index: Any) -> Any:
    if isinstance(index, tuple):
        return tuple(_numpy_index(i) for i in index)
    return index


def reshape_strides(shape: tuple[int, ...], strides: Strides, out_shape: tuple[int, ...]) -> Strides | None:
    """MLX's ``prepare_reshape``: the reshaped view's strides, or ``None`` where MLX copies."""
    if row_contiguous(shape, strides) or math.prod(shape) == 0:
        return row_major(out_shape)
    if not shape:
        return (0,) * len(out_shape)
    cshape, cstrides = [shape[0]], [strides[0]]  # collapse_contiguous_dims (backend/common/utils.cpp)
    for n, s in zip(shape[1:], strides[1:]):
        if n == 1:
            continue
        if s * n != cstrides[-1]:
            cshape.append(n)
            cstrides.append(s)
        else:
            cshape[-1] *= n
            cstrides[-1] = s
    out: list[int] = []
    j = 0
    for n in out_shape:
        if j < len(cshape) and cshape[j] % n == 0:
            cshape[j] //= n
            out.append(cshape[j] * cstrides[j])
            j += cshape[j] == 1
        elif n == 1:
            out.append(out[-1])
        else:
            return None
    return tuple(out)


def collapse_batches(shape: tuple[int, ...], strides: list[Strides],
                     cap: int = 2**31 - 1) -> tuple[tuple[int, ...], list[Strides]]:
    """MLX's ``collapse_contiguous_dims`` (``backend/common/utils.cpp``) of a matmul's batch dimensions: adjacent
    dimensions every operand steps through contiguously merge, size-1 ones drop; ``(1,)`` and zero strides where
    nothing is left (``collapse_batches``, ``backend/common/matmul.h``)."""
    groups: list[list[int]] = [[0] if shape and shape[0] != 1 else []]
    size = shape[0] if shape else 1
    for i in range(1, len(shape)):
        size *= shape[i]
        if any(st[i] * shape[i] != st[i - 1] for st in strides) or size > cap:
            size = shape[i]
            groups.append([])
        if shape[i] != 1:
            groups[-1].append(i)
    kept = [g for g in groups if g]
    if not kept:
        return (1,), [(0,) for _ in strides]
    return tuple(math.prod(shape[d] for d in g) for g in kept), [tuple(st[g[-1]] for g in kept) for st in strides]


def gemm_pointer_batched(a_shape: tuple[int, ...], a_strides: Strides, b_shape: tuple[int, ...],
                         b_strides: Strides) -> bool:
    """Whether MLX's CUDA ``Matmul`` runs cuBLAS over a device array of per-batch pointers, which a kernel of its own
    writes first (``CublasGemm::run_batched``, ``backend/cuda/gemms/cublas_gemm_batched_12_9.cu``: two graph nodes,
    not one). The operands are broadcast to one batch shape, an operand ``check_transpose`` copies already row-major.
    It does where the batch does not collapse to one strided dimension (``collapse_batches``), is not folded into
    the rows (a broadcast ``b`` under a row-major ``a``) and is not a matrix-vector product (``gemm_and_bias``,
    ``backend/cuda/matmul.cpp``): grouped-query attention's fallback products, whose keys repeat over each group."""
    if len(a_shape) <= 2:
        return False
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    a_transposed = not (a_strides[-1] == 1 and a_strides[-2] == k)
    b_transposed = not (b_strides[-1] == 1 and b_strides[-2] == n)
    batch, (a_batch, b_batch) = collapse_batches(a_shape[:-2], [a_strides[:-2], b_strides[:-2]])
    count = math.prod(a_shape[:-2])
    if count > 1 and not a_transposed and len(batch) == 1 and a_strides[-2] == k and a_batch[-1] == m * k \
            and b_batch[-1] == 0:
        return False  # the batches become rows of one GEMM
    if (m == 1 and b_transposed) or (n == 1 and not a_transposed):
        return False  # gemv
    return count // batch[-1] > 1


def elementwise_strides(out_shape: tuple[int, ...], operands: list[tuple[tuple[int, ...], Strides]]) -> Strides:
    """The output strides of a unary, binary or ternary op, from its operands broadcast to ``out_shape``: one
    dense operand beside scalars keeps its strides (``ScalarVector``, a unary op on a dense input), operands all
    column-contiguous keep theirs (``VectorVector``); anything else is written row-major (``General``)."""
    vectors = [(shape, s) for shape, s in operands if any(n > 1 and st for n, st in zip(shape, s))]
    if len(vectors) == 1 and dense(*vectors[0]):
        return vectors[0][1]
    if len(vectors) > 1 and all(s == vectors[0][1] for _, s in vectors) and col_contiguous(*vectors[0]):
        return vectors[0][1]
    return row_major(out_shape)


def broadcast_strides(shape: tuple[int, ...], strides: Strides, out_shape: tuple[int, ...]) -> Strides:
    """A ``Broadcast`` view's strides: 0 along new and stretched dimensions."""
    lead = len(out_shape) - len(shape)
    return (0,) * lead + tuple(0 if n == 1 and m != 1 else s for n, m, s in zip(shape, out_shape[lead:], strides))


def matmul_operand_copied(shape: tuple[int, ...], strides: Strides) -> bool:
    """Whether the CPU ``Matmul`` copies an operand (``check_transpose``): its last two strides are neither
    ``(cols, 1)`` nor ``(1, rows)``."""
    if len(shape) < 2:
        return False
    rows, cols = shape[-2:]
    sx, sy = strides[-2:]
    return not ((sx == cols and sy == 1) or (sx == 1 and sy == rows))


__all__ = ["broadcast_strides", "collapse_batches", "dense", "elementwise_strides", "gemm_pointer_batched",
           "matmul_operand_copied", "reshape_strides", "row_major", "view_strides"]
