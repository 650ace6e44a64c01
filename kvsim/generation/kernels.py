"""Custom kernels mlx-lm runs on a backend that the tracing host cannot: recorded as the one node each is.

mlx-lm picks some implementations by the device it runs on. ``gated_delta_update`` (``mlx_lm/models/
gated_delta.py`` L605-647, Qwen3-Next and Qwen3.5's Gated DeltaNet layers) runs ``gated_delta_kernel``, a
single ``mx.fast.metal_kernel``, when the default device is a Metal GPU and the key head dim is a multiple
of 32, and otherwise ``gated_delta_ops``, a Python loop over the chunk's tokens that keeps a float32 state
per token. kvsim traces on the host it runs on (a CPU without Metal), so it would see the loop: for
Qwen3.5-122B that is ~8.6 GB of states per 2,048-token chunk a Metal run never allocates, and a minute of
tracing (``docs/case-studies.md``, study 1). While a Metal profile is played, ``metal_kernels`` records the
kernel instead: one node reading q, k, v, g, beta and the state, writing ``y`` (``[B, T, Hv, Dv]`` in v's
dtype) and the new float32 state (``[B, Hv, Dv, Dk]``), as ``_gated_delta_kernel_impl`` declares its outputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import mlx.core as mx

from kvsim.generation.trace import Trace
from kvsim.sim.profile import BackendProfile

KERNEL_DK_MULTIPLE = 32
"""``gated_delta_update`` takes the kernel only when ``k.shape[-1]`` is a multiple of 32 (and at least 32)."""


def has_metal_kernels(profile: BackendProfile) -> bool:
    """Whether the played backend is Metal, whose custom kernels mlx-lm uses (the profile names its fused
    attention kernels ``metal``)."""
    return profile.sdpa_kernels == "metal"


def gated_delta_standin(t: Trace, loop: Any) -> Any:
    """``gated_delta_ops``' signature, recording ``gated_delta_kernel``'s one node where mlx-lm would run it."""

    def kernel(q: mx.array, k: mx.array, v: mx.array, g: mx.array, beta: mx.array, state: mx.array,
               mask: mx.array | None = None) -> tuple[mx.array, mx.array]:
        dk = k.shape[-1]
        if dk < KERNEL_DK_MULTIPLE or dk % KERNEL_DK_MULTIPLE:
            return loop(q, k, v, g, beta, state, mask)
        ins = [t.node(a) for a in (q, k, v, g, beta, state, *(() if mask is None else (mask,)))]
        t.depth += 1  # the stand-in outputs are made unrecorded; the node below is what is played
        try:
            b, steps = q.shape[:2]
            y = mx.zeros((b, steps, *v.shape[-2:]), v.dtype)
            new_state = mx.zeros(state.shape, mx.float32)
        finally:
            t.depth -= 1
        nodes = [t.op("GatedDeltaKernel", ins, out) for out in (y, new_state)]
        for n in nodes:
            t.graph.arrays[n].siblings = [m for m in nodes if m != n]
        return y, new_state

    return kernel


@contextlib.contextmanager
def metal_kernels(t: Trace, profile: BackendProfile) -> Iterator[None]:
    """While a Metal profile is played, mlx-lm's Metal-only kernels are recorded as the kernels they are."""
    if not has_metal_kernels(profile):
        yield
        return
    import mlx_lm.models.gated_delta as gd

    loop = gd.gated_delta_ops
    gd.gated_delta_ops = gated_delta_standin(t, loop)
    try:
        yield
    finally:
        gd.gated_delta_ops = loop
