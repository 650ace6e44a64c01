"""Device time of the kernels a prefill chunk spends its time in, on the device (docs/generation.md).

Run on the H200 after ``device_stage.sh`` and ``device_unpack.sh`` (repo root). Each case is evaluated alone
(``mx.eval`` then ``mx.synchronize()``), 3 warm-up runs then 10 timed; the median time gives the rate:
floating-point operations per second for matmuls and attention (a causal call counts the key rows each query
row sees), bytes per second for an elementwise add. Shapes are those of the stored CUDA runs at 1,024- and
2,048-token chunks: Llama-3.1-8B's MLP, its attention at 2K-32K keys, Qwen3-30B-A3B's 4-bit experts,
DeepSeek-V2-Lite's bf16 experts, gpt-oss-20b's mxfp4 experts and its attention with sinks.
Writes ``$OUT/kernel_rates.json``: MLX's version and one row per case.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx

WARM, TIMED = int(os.environ.get("WARM", 3)), int(os.environ.get("TIMED", 10))


def seconds(fn: Callable[[], mx.array]) -> tuple[float, float]:
    """Median wall time of ``fn``'s evaluation, the device synchronised around each run, and the time of the
    first (warm-up) run, which pays for what the process has not done before (kernel builds, graph setups)."""
    times = []
    for _ in range(WARM + TIMED):
        start = time.perf_counter()
        out = fn()
        mx.eval(out)
        mx.synchronize()
        del out
        times.append(time.perf_counter() - start)
    return statistics.median(times[WARM:]), times[0]


def matmul_cases(tokens: int) -> list[tuple[str, Callable[[], mx.array], float]]:
    """Dense bf16 and 4-bit affine matmuls of Llama-3.1-8B's gate projection."""
    x = mx.random.normal((tokens, 4096)).astype(mx.bfloat16)
    w = mx.random.normal((14336, 4096)).astype(mx.bfloat16)
    wq, scales, biases = mx.quantize(w, group_size=64, bits=4)
    mx.eval(x, w, wq, scales, biases)
    flops = 2.0 * tokens * 4096 * 14336
    return [
        (f"matmul bf16 {tokens}x4096x14336", lambda: x @ w.T, flops),
        (f"quantized_matmul 4-bit {tokens}x4096x14336",
         lambda: mx.quantized_matmul(x, wq, scales, biases, transpose=True, group_size=64, bits=4), flops),
    ]


QMM_SHAPES = {"phi-3 qkv": (3072, 9216), "phi-3 gate_up": (3072, 16384), "phi-3 o": (3072, 3072),
              "phi-3 down": (8192, 3072), "llama-8b gate": (4096, 14336)}
"""(K, N) of the 4-bit linear layers timed by ``qmm_shapes``: Phi-3-mini's (the ninth held-out set's miss) and
Llama-3.1-8B's gate, the shape ``matmul`` times."""


def _qmm_operands(tokens: int, k: int, n: int, bits: int) -> tuple[mx.array, mx.array, mx.array, mx.array]:
    """Evaluated ``(x, w, scales, biases)`` of a ``tokens`` x ``k`` by ``k`` x ``n`` affine matmul, group 64."""
    x = mx.random.normal((tokens, k)).astype(mx.bfloat16)
    wq, scales, biases = mx.quantize(mx.random.normal((n, k)).astype(mx.bfloat16), group_size=64, bits=bits)
    mx.eval(x, wq, scales, biases)
    return x, wq, scales, biases


def qmm_shape_cases(tokens: int, bits: int = 4) -> list[tuple[str, Callable[[], mx.array], float]]:
    """Affine matmuls (group 64, ``bits`` wide) of ``QMM_SHAPES`` at ``tokens`` rows: an 8K prompt's last chunk has
    2,047."""
    out = []
    for name, (k, n) in QMM_SHAPES.items():
        x, wq, scales, biases = _qmm_operands(tokens, k, n, bits)

        def call(x=x, wq=wq, scales=scales, biases=biases) -> mx.array:
            return mx.quantized_matmul(x, wq, scales, biases, transpose=True, group_size=64, bits=bits)
        out.append((f"quantized_matmul {bits}-bit {name} {tokens}x{k}x{n}", call, 2.0 * tokens * k * n))
    return out


QMM_GRID = [(1024, 1024), (1024, 3072), (2048, 512), (2048, 2048), (2048, 8192), (3072, 1024), (3072, 3072),
            (3072, 8192), (4096, 1024), (4096, 4096), (4096, 14336), (8192, 2048), (14336, 4096)]
"""(K, N) of the linear layers of the stored quantized CUDA runs, small to large: Qwen3-0.6B's, Llama-3.2-1B's and
3B's, Llama-3.1-8B's and Mistral-7B's projections (keys and values, queries, MLP in and out)."""


def qmm_grid_cases(tokens: int, bits: int) -> list[tuple[str, Callable[[], mx.array], float]]:
    """Affine matmuls (group 64, ``bits`` wide) of ``QMM_GRID`` at ``tokens`` rows, ``COPIES`` independent copies in
    one eval so the device, not the host's launches, sets a small one's time (``seconds`` is a copy's share)."""
    out = []
    for k, n in QMM_GRID:
        x, wq, scales, biases = _qmm_operands(tokens, k, n, bits)

        def call(x=x, wq=wq, scales=scales, biases=biases) -> list[mx.array]:
            return [mx.quantized_matmul(x, wq, scales, biases, transpose=True, group_size=64, bits=bits)
                    for _ in range(COPIES)]
        call.copies = COPIES
        out.append((f"qmm-grid {bits}-bit {tokens}x{k}x{n}", call, 2.0 * tokens * k * n))
    return out


def attention_cases(tokens: int) -> list[tuple[str, Callable[[], mx.array], float]]:
    """cuDNN attention, causal, Llama's heads (32 query, 8 key-value, 128 wide) and gpt-oss's with sinks."""
    out = []
    for heads, kv_heads, dim, sinks in ((32, 8, 128, False), (64, 8, 64, True)):
        q = mx.random.normal((1, heads, tokens, dim)).astype(mx.bfloat16)
        sink = mx.zeros((heads,), mx.bfloat16) if sinks else None
        for keys in (tokens, 4 * tokens, 16 * tokens):
            k = mx.random.normal((1, kv_heads, keys, dim)).astype(mx.bfloat16)
            v = mx.random.normal((1, kv_heads, keys, dim)).astype(mx.bfloat16)
            mx.eval(q, k, v)
            pairs = tokens * keys - tokens * (tokens - 1) // 2
            extra = {"sinks": sink} if sinks else {}

            def call(q=q, k=k, v=v, extra=extra, dim=dim) -> mx.array:
                return mx.fast.scaled_dot_product_attention(q, k, v, scale=dim**-0.5, mask="causal", **extra)

            label = "sdpa sinks" if sinks else "sdpa"
            out.append((f"{label} h{heads}/{kv_heads} d{dim} q{tokens} k{keys}", call, 4.0 * heads * pairs * dim))
    return out


def fallback_cases(tokens: int) -> list[tuple[str, Callable[[], mx.array], float]]:
    """MLX's fallback attention (no fused kernel: a head size cuDNN does not take, or float32), causal, at the
    shapes kvsim's CUDA plays miss: gemma-3-1b's (4 query, 1 key-value head, 256 wide, bf16), phi-2's float32
    queries (32 heads, 80 wide) and olmo-2-1b's float32 (16 heads, 128 wide). Work: the full score matrices'
    arithmetic (the fallback computes every (query, key) pair, masked or not)."""
    out = []
    for heads, kv_heads, dim, dtype in ((4, 1, 256, mx.bfloat16), (32, 32, 80, mx.float32), (16, 16, 128, mx.float32)):
        q = mx.random.normal((1, heads, tokens, dim)).astype(dtype)
        for keys in (tokens, 4 * tokens):
            k = mx.random.normal((1, kv_heads, keys, dim)).astype(dtype)
            v = mx.random.normal((1, kv_heads, keys, dim)).astype(dtype)
            mx.eval(q, k, v)

            def call(q=q, k=k, v=v, dim=dim) -> mx.array:
                return mx.fast.scaled_dot_product_attention(q, k, v, scale=dim**-0.5, mask="causal")

            name = "bf16" if dtype == mx.bfloat16 else "fp32"
            out.append((f"fallback {name} h{heads}/{kv_heads} d{dim} q{tokens} k{keys}", call,
                        4.0 * heads * tokens * keys * dim))
    return out


FALLBACK_SHAPES = ((4, 1, 256, "bf16"), (8, 4, 256, "bf16"), (32, 32, 80, "fp32"), (16, 16, 128, "fp32"))
"""Query heads, key-value heads, head size and dtype of the fallback attentions kvsim plays: gemma-3-1b,
gemma-2-2b (a head size cuDNN does not take), phi-2 and olmo-2-1b (float32)."""

COPIES = int(os.environ.get("COPIES", 8))


def fallback_op_cases(tokens: int) -> list[tuple[str, Callable[[], mx.array], float]]:
    """Each op of MLX's fallback attention (``mlx/fast.cpp``: scale, ``q @ k.T``, causal mask, precise softmax,
    ``@ v``) alone, its inputs evaluated first, ``COPIES`` independent copies in one eval so the device, not
    the host's launches, sets the time: ``seconds`` is a copy's share. Work: bytes each copy reads and writes,
    plus (matmuls) its arithmetic in ``flops``; the rate reads as bytes per second."""
    out = []
    for heads, kv_heads, dim, name in FALLBACK_SHAPES:
        dtype = mx.bfloat16 if name == "bf16" else mx.float32
        reps = heads // kv_heads
        q = mx.random.normal((1, heads, tokens, dim)).astype(dtype)
        qs = mx.unflatten(q * dim**-0.5, 1, (kv_heads, reps)) if reps > 1 else q * dim**-0.5
        for keys in (tokens, 4 * tokens):
            k = mx.random.normal((1, kv_heads, keys, dim)).astype(dtype)
            v = mx.random.normal((1, kv_heads, keys, dim)).astype(dtype)
            if reps > 1:
                k, v = mx.expand_dims(k, 2), mx.expand_dims(v, 2)
            scores = qs @ mx.swapaxes(k, -1, -2)
            m = mx.greater_equal(mx.expand_dims(mx.arange(keys - tokens, keys), 1), mx.expand_dims(mx.arange(keys), 0))
            masked = mx.where(m, scores, mx.array(mx.finfo(scores.dtype).min, scores.dtype))
            probs = mx.softmax(masked, axis=-1, precise=True)
            mx.eval(q, qs, k, v, scores, m, masked, probs)
            sb, qb, kb = scores.nbytes, qs.nbytes, k.nbytes
            pairs_flops = 2.0 * heads * tokens * keys * dim
            ops = (("scale", lambda q=q, d=dim: q * d**-0.5, 2 * q.nbytes),
                   ("q@k.T", lambda qs=qs, k=k: qs @ mx.swapaxes(k, -1, -2), qb + kb + sb),
                   ("mask", lambda n=keys: mx.greater_equal(mx.expand_dims(mx.arange(n - tokens, n), 1),
                                                            mx.expand_dims(mx.arange(n), 0)), m.nbytes),
                   ("where", lambda m=m, s=scores: mx.where(m, s, mx.array(mx.finfo(s.dtype).min, s.dtype)),
                    2 * sb + m.nbytes),
                   ("softmax", lambda x=masked: mx.softmax(x, axis=-1, precise=True), 2 * sb),
                   ("p@v", lambda p=probs, v=v: p @ v, sb + kb + qb),
                   ("whole", lambda q=q, k=k[:, :, 0] if reps > 1 else k, v=v[:, :, 0] if reps > 1 else v, d=dim:
                    mx.fast.scaled_dot_product_attention(q, k, v, scale=d**-0.5, mask="causal"), 0))
            for op, fn, moved in ops:
                def call(fn=fn) -> list[mx.array]:
                    return [fn() for _ in range(COPIES)]
                call.copies = COPIES
                call.flops = {"q@k.T": pairs_flops, "p@v": pairs_flops, "whole": 2 * pairs_flops}.get(op, 0.0)
                out.append((f"fallback-op {op} {name} h{heads}/{kv_heads} d{dim} q{tokens} k{keys}", call,
                            float(moved)))
    return out


def expert_cases(tokens: int) -> list[tuple[str, Callable[[], mx.array], float]]:
    """One expert projection of three MoE models, tokens sorted by expert as ``SwitchGLU`` sorts them."""
    out = []
    for label, experts, top_k, hidden, inter, quant in (
            ("gather_qmm 4-bit qwen3-30b-a3b", 128, 8, 2048, 768, {"group_size": 64, "bits": 4}),
            ("gather_mm bf16 deepseek-v2-lite", 64, 6, 2048, 1408, None),
            ("gather_qmm mxfp4 gpt-oss-20b", 32, 4, 2880, 2880, {"group_size": 32, "bits": 4, "mode": "mxfp4"})):
        rows = tokens * top_k
        idx = mx.sort(mx.random.randint(0, experts, (rows,))).astype(mx.uint32)
        x = mx.random.normal((rows, 1, hidden)).astype(mx.bfloat16)
        w = mx.random.normal((experts, inter, hidden)).astype(mx.bfloat16) * 0.02
        flops = 2.0 * rows * hidden * inter
        if quant is None:
            mx.eval(idx, x, w)
            wt = w.swapaxes(-1, -2)
            out.append((f"{label} {tokens}", lambda x=x, wt=wt, idx=idx: mx.gather_mm(
                x, wt, rhs_indices=idx, sorted_indices=True), flops))
            continue
        parts = mx.quantize(w, **quant)
        mx.eval(idx, x, *parts)
        wq, scales, biases = parts if len(parts) == 3 else (parts[0], parts[1], None)
        out.append((f"{label} {tokens}", lambda x=x, wq=wq, s=scales, b=biases, idx=idx, q=quant: mx.gather_qmm(
            x, wq, s, b, rhs_indices=idx, transpose=True, sorted_indices=True, **q), flops))
    return out


def bandwidth_case() -> tuple[str, Callable[[], mx.array], float]:
    a = mx.random.normal((256 << 20,)).astype(mx.bfloat16)
    b = mx.random.normal((256 << 20,)).astype(mx.bfloat16)
    mx.eval(a, b)
    return "add bf16 256M elements", lambda: a + b, 3.0 * a.nbytes


def host_cases(ops: int) -> list[tuple[str, Callable[[], mx.array], float]]:
    """The host's time per op: a chain of ``ops`` adds on 1,024 elements, whose kernels take the device next to
    no time, so the chain's time is the host's (the rate reads as ops per second)."""
    x = mx.zeros((1024,), mx.bfloat16)
    mx.eval(x)

    def chain(n: int) -> mx.array:
        y = x
        for _ in range(n):
            y = y + 1
        return y

    def call(n: int = ops) -> mx.array:
        return chain(n)

    def build_only(n: int = ops) -> mx.array:  # the graph built, not evaluated: Python's share
        chain(n)
        return x

    return [(f"host chain of {ops} adds", call, float(ops)), (f"host build only, {ops} adds", build_only, float(ops))]


def forward_cases(tokens: int, name: str = "llama-3.1-8b-instruct",
                  layers: int = 8) -> list[tuple[str, Callable[[], mx.array], float]]:
    """A prefill chunk through ``name``'s first ``layers`` layers at full width, its caches' state evaluated as
    mlx-lm's prefill does. ``chunk.encode_s`` keeps the host's share of each run: ``mx.async_eval`` returns once
    every op is encoded, and with fewer than MLX's 10 command buffers in flight it never waits on the device.
    The rate reads as chunks per second."""
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation.config import ModelConfig, load_model_config
    from kvsim.generation.model import build_model

    config = dict(load_model_config(name).config, num_hidden_layers=layers)
    model = build_model(ModelConfig(config, name), stand_in=False).model
    mx.eval(model.parameters())
    ids = mx.random.randint(0, 256, (1, tokens)).astype(mx.uint32)

    def chunk() -> mx.array:
        cache = make_prompt_cache(model)
        model(ids, cache=cache)
        state = [a for c in cache for a in c.state]
        start = time.perf_counter()
        mx.async_eval(state)
        chunk.encode_s.append(time.perf_counter() - start)
        return state[-1]

    chunk.encode_s = []
    return [(f"forward {name} x{layers} layers, {tokens} tokens", chunk, 1.0)]


def main() -> None:
    groups = {"bandwidth": lambda _: [bandwidth_case()], "matmul": matmul_cases, "attention": attention_cases,
              "fallback": fallback_cases, "fallback_ops": fallback_op_cases,
              "experts": expert_cases, "qmm_shapes": qmm_shape_cases,
              "qmm6_shapes": lambda t: qmm_shape_cases(t, 6), "qmm8_shapes": lambda t: qmm_shape_cases(t, 8),
              **{f"qmm{b}_grid": (lambda t, b=b: qmm_grid_cases(t, b)) for b in (4, 5, 6, 8)},
              "host": host_cases, "forward": forward_cases,
              "moe_forward": lambda t: forward_cases(t, "qwen3-30b-a3b-4bit")}
    plan = os.environ.get("CASES", "bandwidth:0,matmul:1024,attention:1024,experts:1024,matmul:2048,"
                                   "attention:2048,experts:2048")
    out = Path(os.environ.get("OUT", "."), "kernel_rates.json")
    rows = []
    for group, tokens in (g.split(":") for g in plan.split(",")):
        for label, fn, work in groups[group](int(tokens)):
            print(f"{label:48s}", end="", flush=True)
            s, first_s = seconds(fn)
            copies = getattr(fn, "copies", 1)  # several copies in one eval: a copy's share
            s, first_s = s / copies, first_s / copies
            rows.append({"case": label, "seconds": s, "first_seconds": first_s, "work": work, "rate_per_s": work / s})
            if copies > 1:
                rows[-1].update(copies=copies, flops=getattr(fn, "flops", 0.0))
            encode = getattr(fn, "encode_s", None)
            if encode:
                rows[-1]["host_encode_seconds"] = statistics.median(encode[-TIMED:])
                rows[-1]["host_encode_seconds_each"] = list(encode)  # the warm-up runs first: the first is cold
            each = " ".join(f"{x * 1e3:.2f}" for x in encode or ())
            print(f" {s * 1e3:9.3f} ms (first {first_s * 1e3:.3f}) {work / s / 1e12:9.2f} T/s", *([f"host encode ms: {each}"] if encode else []),
                  flush=True)
            result = {"mlx": mx.__version__, "device": str(mx.default_device()), "rows": rows}
            out.write_text(json.dumps(result, indent=1), encoding="utf-8")  # each case as it lands


if __name__ == "__main__":
    main()
