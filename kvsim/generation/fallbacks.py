"""MLX's fallback graphs of the ``mx.fast`` ops, written with ``mx`` ops so a trace records each array.

Where a backend has no kernel for a fast op (the CPU backend of MLX 0.32.4 has none for ``rms_norm``,
``layer_norm``, ``rope`` or ``scaled_dot_product_attention``), MLX builds the op's ``fallback`` lambda
from ``mlx/fast.cpp`` instead: these functions build the same ops, in the same order, with the same
dtypes (the values are never computed: only their shapes matter to a trace).
"""

from __future__ import annotations

import math
from typing import Any

import mlx.core as mx


def result_type(a: mx.Dtype, b: mx.Dtype) -> mx.Dtype:
    """MLX's promotion of two floating dtypes (``result_type``): equal stays, a mix of halves is float32."""
    if a == b:
        return a
    if mx.float32 in (a, b) or {a, b} == {mx.float16, mx.bfloat16}:
        return mx.float32
    return a if mx.issubdtype(a, mx.floating) else b


def rms_norm(x: mx.array, weight: mx.array | None, eps: float, **_: Any) -> mx.array:
    """``fast::rms_norm``'s fallback: float32 mean of squares, rsqrt, cast back, times the weight."""
    out_type = result_type(x.dtype, weight.dtype) if weight is not None else x.dtype
    w = weight.astype(out_type) if weight is not None else None
    y = x.astype(mx.float32)
    y = y * mx.rsqrt(mx.add(mx.mean(mx.square(y), axis=-1, keepdims=True), mx.array(eps, mx.float32)))
    y = y.astype(out_type)
    return y * w if w is not None else y


def layer_norm(x: mx.array, weight: mx.array | None, bias: mx.array | None, eps: float, **_: Any) -> mx.array:
    """``fast::layer_norm``'s fallback."""
    out_type = x.dtype if weight is None else result_type(x.dtype, weight.dtype)
    y = x.astype(mx.float32)
    xc = mx.subtract(y, mx.mean(y, axis=-1, keepdims=True))
    v = mx.mean(mx.square(xc), axis=-1, keepdims=True)
    y = mx.multiply(xc, mx.rsqrt(mx.add(v, mx.array(eps, mx.float32)))).astype(out_type)
    if weight is not None:
        y = y * weight.astype(out_type)
    if bias is not None:
        y = y + bias.astype(out_type)
    return y


def rope(x: mx.array, dims: int, *, traditional: bool, base: float | None, scale: float, offset: Any,
         freqs: mx.array | None = None, **_: Any) -> mx.array:
    """``fast::rope``'s fallback (forward, not traditional unless asked)."""
    shape = x.shape
    if x.ndim == 3:
        x = mx.expand_dims(x, 1)
    elif x.ndim > 4:
        x = mx.flatten(x, 1, x.ndim - 3)
    t = x.dtype
    half = dims // 2
    off = offset if isinstance(offset, mx.array) else mx.array(offset, mx.int32)
    positions = mx.multiply(mx.add(mx.arange(x.shape[2], dtype=mx.float32), off), mx.array(scale, mx.float32))
    if freqs is not None:
        inv = mx.reciprocal(freqs.astype(mx.float32))
    else:
        inv = mx.exp(mx.multiply(mx.arange(0, -half, -1, dtype=mx.float32),
                                 mx.array(math.log(base or 1.0) / half, mx.float32)))
    theta = mx.multiply(mx.expand_dims(positions, -1), inv)
    coss, sins = mx.cos(theta).astype(t), mx.sin(theta).astype(t)
    if traditional:
        x1, x2 = x[..., 0:dims:2], x[..., 1:dims:2]
    else:
        x1, x2 = x[..., :half], x[..., half:dims]
    outs = [mx.subtract(mx.multiply(x1, coss), mx.multiply(x2, sins)),
            mx.add(mx.multiply(x1, sins), mx.multiply(x2, coss))]
    if traditional:
        outs = [mx.expand_dims(o, -1) for o in outs]
        out = mx.reshape(mx.concatenate(outs, -1), (*x.shape[:3], dims))
        if dims < x.shape[-1]:
            out = mx.concatenate([out, x[..., dims:]], -1)
        return mx.reshape(out, shape)
    if dims < x.shape[-1]:
        outs.append(x[..., dims:])
    return mx.reshape(mx.concatenate(outs, -1), shape)


def scaled_dot_product_attention(q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask: Any = None,
                                 sinks: mx.array | None = None, **_: Any) -> mx.array:
    """``fast::scaled_dot_product_attention``'s fallback: scores, mask, precise softmax, ``@ v``."""
    n_q, n_kv = q.shape[1], k.shape[1]
    qs = mx.multiply(mx.array(scale, q.dtype), q)
    reps = n_q // n_kv
    if reps > 1:
        qs = mx.unflatten(qs, 1, (n_kv, reps))
        k, v = mx.expand_dims(k, 2), mx.expand_dims(v, 2)
    scores = mx.matmul(qs, mx.swapaxes(k, -1, -2))
    if isinstance(mask, str) or isinstance(mask, mx.array):
        if isinstance(mask, str):
            kl, ql = k.shape[-2], qs.shape[-2]
            m = mx.greater_equal(mx.expand_dims(mx.arange(kl - ql, kl), 1), mx.expand_dims(mx.arange(0, kl), 0))
        else:
            m = mask if mask.dtype == mx.bool_ else mask.astype(scores.dtype)
            if reps > 1 and m.ndim >= 3:
                m = mx.expand_dims(m, -3) if m.shape[-3] == 1 else mx.unflatten(m, -3, (n_kv, reps))
        if m.dtype == mx.bool_:
            scores = mx.where(m, scores, mx.array(mx.finfo(scores.dtype).min, scores.dtype))
        else:
            scores = mx.add(scores, m)
    if sinks is not None:
        s = mx.expand_dims(sinks.astype(scores.dtype), (0, 2, 3))
        if scores.ndim == 5:
            s = mx.unflatten(s, 1, (n_kv, reps))
        scores = mx.concatenate([mx.broadcast_to(s, (*scores.shape[:-1], 1)), scores], -1)
    scores = mx.softmax(scores, axis=-1, precise=True)
    if sinks is not None:
        scores = scores[..., 1:]
    out = mx.matmul(scores, v)
    return mx.flatten(out, 1, 2) if reps > 1 else out


def dequantize(w: mx.array, scales: mx.array, biases: mx.array | None = None, group_size: int | None = None,
               bits: int | None = None, mode: str = "affine", dtype: mx.Dtype | None = None, **_: Any) -> mx.array:
    """``affine_dequantize``'s fallback (``mlx/ops.cpp``), what the CPU builds for ``mx.dequantize``: for
    power-of-two bits, each packed value shifted out into a uint32 array the size of ``w``, concatenated
    (uint32, the output's element count), then cast to the scales' type, scaled and biased."""
    group_size, bits = group_size or 64, bits or 4
    if bits & (bits - 1):  # the bit-by-bit path: 32 one-bit planes, regrouped and summed
        planes = mx.bitwise_and(mx.right_shift(mx.expand_dims(w, -1), mx.arange(32, dtype=mx.uint32)),
                                mx.array([1], mx.uint32))
        planes = mx.reshape(planes, (*planes.shape[:-2], -1, bits))
        q = mx.sum(mx.left_shift(planes, mx.arange(bits, dtype=mx.uint32)), axis=-1)
    else:
        parts = [mx.expand_dims(mx.right_shift(mx.left_shift(w, mx.array(32 - (start + bits), mx.uint32)),
                                               mx.array(32 - bits, mx.uint32)), -1)
                 for start in range(0, 32, bits)]
        q = mx.concatenate(parts, -1)
    q = mx.reshape(q, (*w.shape[:-1], -1, group_size))
    q = mx.multiply(q, mx.expand_dims(scales, -1))
    q = mx.add(q, mx.expand_dims(biases, -1))
    q = mx.reshape(q, (*w.shape[:-1], -1))
    return q.astype(dtype) if dtype is not None else q
