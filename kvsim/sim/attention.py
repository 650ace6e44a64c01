"""Whether ``mx.fast.scaled_dot_product_attention`` runs a fused kernel or MLX's fallback.

The fallback materialises the scores (``q @ k.T``, mask, softmax, ``@ v``); a fused kernel
allocates only its output. Rules per backend, from MLX 0.32's ``use_fallback``:

- CPU: always the fallback.
- CUDA (``mlx/backend/cuda/scaled_dot_product_attention.cpp``): cuDNN for float16/bfloat16 with
  head_dim a multiple of 8 up to 128 and, when causal, no more query than key rows (decode only
  with a fixed-size cache, where the vector kernel serves anyway); the vector kernel for fewer
  than 4 query rows with head_dim 64, 96 or 128. Attention with sinks and an array mask runs the fallback
  (measured on MLX 0.32.4: gpt-oss-20b's sliding-window layers; ``kvsim.generation.trace._gpu_sdpa``).
- Metal (``mlx/backend/metal/scaled_dot_product_attention.cpp``, unverified here): the vector
  kernel for up to 8 query rows with head_dim 64, 96, 128 or 256; the full kernel for head_dim
  64, 80 or 128.
"""

from __future__ import annotations

VECTOR_TWO_PASS_KEY_ROWS = 1024  # the CUDA vector kernel splits keys over 32 blocks past this
VECTOR_TWO_PASS_BLOCKS = 32
FLOAT32_BYTES = 4


def cuda_vector_two_pass_temps_bytes(q_rows: int, k_rows: int, head_dim: int, batch_heads: int) -> tuple[int, ...]:
    """Temporaries of MLX-CUDA's two-pass vector attention (``sdpa_vector_2pass_fallback``): float32
    partial outputs, sums and maxima of 32 key blocks per query row; none for the one-pass kernel.
    Call it where the vector kernel serves (``fused_attention`` true and not cuDNN)."""
    if k_rows <= VECTOR_TWO_PASS_KEY_ROWS:
        return ()
    rows = batch_heads * q_rows * VECTOR_TWO_PASS_BLOCKS
    return rows * head_dim * FLOAT32_BYTES, rows * FLOAT32_BYTES, rows * FLOAT32_BYTES


def cuda_cudnn_attention(q_rows: int, k_rows: int, head_dim: int, itemsize_bytes: int) -> bool:
    """Whether MLX-CUDA's cuDNN attention serves the call (it is tried before the vector kernel)."""
    return itemsize_bytes == 2 and head_dim % 8 == 0 and head_dim <= 128 and q_rows <= k_rows and q_rows > 1


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
        vector = q_rows < 4 and head_dim in (64, 96, 128)
        return cuda_cudnn_attention(q_rows, k_rows, head_dim, itemsize_bytes) or vector
    if kernels == "metal":
        vector = q_rows <= 8 and head_dim in (64, 96, 128, 256)
        full = head_dim in (64, 80, 128)
        return vector or full
    return False
