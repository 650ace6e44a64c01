"""Does the buffer cache's refill set how far a CUDA prefill runs ahead? (docs/generation.md, fourth set)

Two measurements on the device, printed as one JSON object:

- ``malloc``: the host time of ``mx.eval(mx.zeros(n))`` when MLX's cache holds a buffer of that size (a reuse)
  against after ``mx.clear_cache()`` and a synchronize (``cudaMallocAsync`` from a pool the synchronize
  trimmed), per size; the difference over the bytes is the rate at which the host takes memory from the
  system.
- ``generations``: full-size generations of the given configs (random weights), each model built once, its
  workload run twice as mlx-lm runs it (``mx.clear_cache()`` after every prefill chunk) and twice with
  ``mx.clear_cache`` a no-op, so later chunks reuse the cached buffers; peak active memory of each.

    python3 docs/tools/device/clear_cache_effect.py olmo-2-0425-1b llama-3.1-8b-instruct --tokens 8192
"""

from __future__ import annotations

import argparse
import json
import time


def malloc_rates(sizes_mb: list[int]) -> list[dict]:
    """Host seconds of one allocating eval, from the cache and from the system, per size."""
    import mlx.core as mx

    out = []
    for mb in sizes_mb:
        shape = (mb, 1 << 19)  # bfloat16: mb MiB (one dimension would overflow MLX's int32 at 4 GiB)
        times = {}
        for mode in ("system", "cache", "system", "cache"):
            if mode == "system":
                mx.synchronize()
                mx.clear_cache()
                mx.synchronize()
            t = time.perf_counter()
            a = mx.zeros(shape, dtype=mx.bfloat16)
            mx.eval(a)
            times.setdefault(mode, []).append(time.perf_counter() - t)
            del a
        out.append({"mib": mb, "system_s": min(times["system"]), "cache_s": min(times["cache"])})
    return out


def generations(names: list[str], tokens: int, max_tokens: int) -> list[dict]:
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation.config import load_model_config
    from kvsim.generation.model import build_model

    real_clear = mx.clear_cache
    out = []
    for name in names:
        mx.random.seed(0)
        model = build_model(load_model_config(name), stand_in=False).model
        mx.eval(model.parameters())
        mx.synchronize()
        real_clear()
        weights = mx.get_active_memory()
        prompt = mx.random.randint(0, 256, (tokens,)).astype(mx.uint32)
        mx.eval(prompt)
        for mode in ("clear", "clear", "keep", "keep"):
            mx.clear_cache = real_clear if mode == "clear" else (lambda: None)
            cache = make_prompt_cache(model)
            mx.synchronize()
            real_clear()
            mx.reset_peak_memory()
            t = time.perf_counter()
            for n, _ in enumerate(generate_step(prompt, model, max_tokens=max_tokens, prompt_cache=cache)):
                if n + 1 >= max_tokens:
                    break
            mx.synchronize()
            out.append({"name": name, "mode": mode, "prompt_tokens": tokens, "max_tokens": max_tokens,
                        "peak_bytes": mx.get_peak_memory(), "weights_bytes": weights,
                        "seconds": time.perf_counter() - t})
            print(json.dumps(out[-1]), flush=True)
            mx.clear_cache = real_clear
            del cache
        del model
        mx.synchronize()
        real_clear()
    return out


def main() -> int:
    import mlx.core as mx
    import mlx_lm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--sizes-mb", default="16,64,256,1024,4096")
    args = ap.parse_args()
    result = {"mlx_version": mx.__version__, "mlx_lm_version": mlx_lm.__version__,
              "device": mx.device_info().get("device_name"),
              "malloc": malloc_rates([int(x) for x in args.sizes_mb.split(",")])}
    print(json.dumps(result["malloc"]), flush=True)
    result["generations"] = generations(args.configs, args.tokens, args.max_tokens)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
