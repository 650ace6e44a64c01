"""What a fused attention call allocates beside its output on MLX-CUDA (cuDNN's workspace, a copy of an input), per
shape: each call alone, its inputs evaluated first, the buffer cache cleared; the peak above the memory held before
it, less its output. Shapes of the CUDA misses' last prompt chunks (2,047 query rows) and of whole chunks (2,048),
keys as mlx-lm's KVCache hands them over: a slice of a buffer grown in 256-row steps. Prints one JSON line per call.

    python docs/tools/device/sdpa_workspace.py
"""

import json

import mlx.core as mx

CASES = [  # (label, heads, kv heads, head_dim, query rows, key rows)
    ("smollm2-1.7b", 32, 32, 64, 2048, 4096), ("smollm2-1.7b", 32, 32, 64, 2047, 6143),
    ("smollm2-1.7b", 32, 32, 64, 2048, 6144), ("smollm2-1.7b", 32, 32, 64, 2047, 8191),
    ("smollm2-1.7b", 32, 32, 64, 2048, 2048), ("smollm2-1.7b", 32, 32, 64, 2047, 2047),
    ("qwen3-0.6b", 16, 8, 128, 2048, 6144), ("qwen3-0.6b", 16, 8, 128, 2047, 8191),
    ("llama-3.1-8b", 32, 8, 128, 2048, 6144), ("llama-3.1-8b", 32, 8, 128, 2047, 8191),
]


def one(label: str, heads: int, kv_heads: int, dim: int, q_rows: int, k_rows: int) -> dict:
    buf_rows = (k_rows + 255) // 256 * 256
    q = mx.random.normal((1, heads, q_rows, dim)).astype(mx.bfloat16)
    kb = mx.random.normal((1, kv_heads, buf_rows, dim)).astype(mx.bfloat16)
    vb = mx.random.normal((1, kv_heads, buf_rows, dim)).astype(mx.bfloat16)
    mx.eval(q, kb, vb)
    k, v = kb[:, :, :k_rows], vb[:, :, :k_rows]
    mx.synchronize()
    mx.clear_cache()
    before = mx.get_active_memory()
    mx.reset_peak_memory()
    out = mx.fast.scaled_dot_product_attention(q, k, v, scale=dim**-0.5, mask="causal")
    mx.eval(out)
    mx.synchronize()
    extra = mx.get_peak_memory() - before - out.nbytes
    return {"label": label, "heads": heads, "kv_heads": kv_heads, "head_dim": dim, "q_rows": q_rows, "k_rows": k_rows,
            "out_bytes": out.nbytes, "extra_bytes": extra, "mlx": mx.__version__}


if __name__ == "__main__":
    for case in CASES:
        for _ in range(2):  # the second call meets cuDNN's cached graph
            print(json.dumps(one(*case)), flush=True)
