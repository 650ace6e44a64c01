"""Is a CUDA prefill chunk host-bound or device-bound? (docs/generation.md, the fourth held-out set)

For each config, at full size with random weights: the prompt's prefill chunks as ``generate_step`` runs them
(on mlx-lm's ``generation_stream``, ``mx.clear_cache()`` after each), every chunk timed in three phases: the
model call that builds the lazy graph, ``mx.async_eval`` of the caches' state (the host's encoding, which
returns before the device finishes unless MLX's in-flight limit makes it wait), and the synchronize after it;
with the chunk's peak above the memory held before it. The prompt is run twice on a fresh cache each time
(the first pass pays for kernel builds). Prints one JSON line per chunk.

    MLX_MAX_OPS_PER_BUFFER=20 python3 docs/tools/device/chunk_timing.py olmo-2-0425-1b --tokens 8192
    python3 docs/tools/device/chunk_timing.py olmo-2-0425-1b --dtype bfloat16
    python3 docs/tools/device/chunk_timing.py olmo-2-0425-1b --sync   # mx.eval, as generate_step (encode_s = wall)
"""

from __future__ import annotations

import argparse
import json
import os
import time


def passes(name: str, tokens: int, step: int, runs: int, dtype: str | None = None, sync: bool = False) -> None:
    import mlx.core as mx
    from mlx_lm.generate import generation_stream
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation.config import load_model_config
    from kvsim.generation.model import build_model

    mx.random.seed(0)
    model = build_model(load_model_config(name), dtype, stand_in=False).model
    mx.eval(model.parameters())
    prompt = mx.random.randint(0, 256, (1, tokens)).astype(mx.uint32)
    mx.eval(prompt)
    for run in range(runs):
        cache = make_prompt_cache(model)
        mx.synchronize()
        mx.clear_cache()
        for start in range(0, tokens - 1, step):
            held = mx.get_active_memory()
            mx.reset_peak_memory()
            with mx.stream(generation_stream):
                # sliced on the model's stream, as generate_step slices: until 2026-12-03 (every stored
                # chunk-timing-*.jsonl) it was sliced on the default stream, and a chunk after the first then peaked
                # as it does not in mlx-lm (docs/generation.md, "CUDA: chunk_timing.py sliced its prompt on another stream")
                chunk = prompt[:, start:min(start + step, tokens - 1)]
                t0 = time.perf_counter()
                model(chunk, cache=cache)
                t1 = time.perf_counter()
                (mx.eval if sync else mx.async_eval)([c.state for c in cache])
                t2 = time.perf_counter()
            mx.synchronize()
            t3 = time.perf_counter()
            print(json.dumps({"name": name, "run": run, "offset": start, "tokens": chunk.shape[1],
                              "build_s": t1 - t0, "encode_s": t2 - t1, "wall_s": t3 - t1,
                              "encode_start_s": t1, "encode_end_s": t2, "done_s": t3,
                              "peak_above_bytes": mx.get_peak_memory() - held,
                              "max_ops_per_buffer": os.environ.get("MLX_MAX_OPS_PER_BUFFER", ""),
                              "dtype": dtype or "config", "eval": "eval" if sync else "async_eval"}), flush=True)
            mx.clear_cache()
        del cache
    del model
    mx.synchronize()
    mx.clear_cache()


def main() -> int:
    import mlx.core as mx

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--step", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--dtype", default=None, help="the weights' dtype (default: the config's)")
    ap.add_argument("--sync", action="store_true", help="mx.eval the state, as generate_step does (default: async_eval)")
    args = ap.parse_args()
    print(json.dumps({"mlx_version": mx.__version__, "device": mx.device_info().get("device_name")}), flush=True)
    for name in args.configs:
        passes(name, args.tokens, args.step, args.runs, args.dtype, args.sync)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
