"""Whether ``mx.fast.scaled_dot_product_attention`` runs a fused kernel or MLX's fallback.

The fallback materialises the scores (``q @ k.T``, mask, softmax, ``@ v``); a fused kernel
allocates only its output. Rules per backend, from MLX 0.32's ``use_fallback``:

- CPU: always the fallback.
- CUDA (``mlx/backend/cuda/scaled_dot_product_attention.cpp``): cuDNN for float16/bfloat16 with
  head_dim a multiple of 8 up to 128 and, when causal, no more query than key rows (decode only
  with a fixed-size cache, where the vector kernel serves anyway); the vector kernel for fewer
  than 4 query rows with head_dim 64, 96 or 128.
- Metal (``mlx/backend/metal/scaled_dot_product_attention.cpp``, unverified here): the vector
  kernel for up to 8 query rows with head_dim 64, 96, 128 or 256; the full kernel for head_dim
  64, 80 or 128.
"""

from __future__ import annotations


def fused_attention(kernels: str, q_rows: int, k_rows: int, head_dim: int, itemsize_bytes: int) -> bool:
    """True where the backend's fused SDPA kernel serves this call.

    Args:
        kernels: The profile's ``sdpa_kernels``: ``fallback``, ``cuda`` or ``metal``.
        q_rows: Query rows (the step's new rows, at least 1).
        k_rows: Key rows held after the update.
        head_dim: Width of one head.
        itemsize_bytes: 2 for float16/bfloat16, 4 for float32.
    """
    if kernels == "cuda":
        cudnn = itemsize_bytes == 2 and head_dim % 8 == 0 and head_dim <= 128 and q_rows <= k_rows and q_rows > 1
        vector = q_rows < 4 and head_dim in (64, 96, 128)
        return cudnn or vector
    if kernels == "metal":
        vector = q_rows <= 8 and head_dim in (64, 96, 128, 256)
        full = head_dim in (64, 80, 128)
        return vector or full
    return False
