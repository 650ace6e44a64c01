"""The same prefill chunk evaluated again and again in one process: its peak and host time, cold and warm.

Run on the device after ``device_stage.sh`` and ``device_unpack.sh`` (repo root), twice in two processes:
the first on a fresh machine builds every kernel (MLX's JIT cache is empty), the second finds them cached
but sets up its CUDA graphs and cuDNN plans anew. Each call is mlx-lm's prefill step on a fresh cache
(``model(chunk)``, then ``mx.eval`` of the caches' state), ``mx.synchronize()`` around it; it records the
peak above the memory held before it, the host's encode time (``mx.async_eval`` returning) and the wall
time. Writes ``$OUT/cold-chunks-<tag>.json``; ``docs/generation.md`` reads it beside kvsim's ends.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import mlx.core as mx

CALLS = 4


def chunk_calls(name: str, tokens_list: tuple[int, ...]) -> list[dict]:
    """``CALLS`` prefill steps of each chunk length on fresh caches, in this process."""
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation.config import load_model_config
    from kvsim.generation.model import build_model

    mx.random.seed(0)
    model = build_model(load_model_config(name), stand_in=False).model
    mx.eval(model.parameters())
    mx.synchronize()
    mx.clear_cache()
    # STREAM=new: the calls run on a stream of their own, as generate_step's do (mlx-lm's generation_stream)
    stream = mx.new_stream(mx.default_device()) if os.environ.get("STREAM") == "new" else mx.default_stream(mx.default_device())
    rows = []
    for tokens in tokens_list:
        ids = mx.random.randint(0, 256, (1, tokens)).astype(mx.uint32)
        mx.eval(ids)
        for call in range(1, CALLS + 1):
            with mx.stream(stream):
                rows.append(one_call(model, ids, make_prompt_cache(model), name, tokens, call))
            mx.clear_cache()
    return rows


def one_call(model: Any, ids: mx.array, cache: list, name: str, tokens: int, call: int) -> dict:
    """One prefill step on ``cache``, synchronised around: its peak above what was held, and its times."""
    mx.synchronize()
    held = mx.get_active_memory()
    mx.reset_peak_memory()
    start = time.perf_counter()
    model(ids, cache=cache)
    state = [a for c in cache for a in c.state]
    built = time.perf_counter()
    mx.async_eval(state)
    encoded = time.perf_counter()
    mx.synchronize()
    done = time.perf_counter()
    r = {"model": name, "tokens": tokens, "call": call, "held_bytes": held,
         "peak_above_bytes": mx.get_peak_memory() - held, "build_s": built - start,
         "encode_s": encoded - built, "wall_s": done - start}
    print(f"{name} {tokens} call {call}: peak +{r['peak_above_bytes'] / 1e9:.3f} GB, build {r['build_s'] * 1e3:.1f} ms, "
          f"encode {r['encode_s'] * 1e3:.1f} ms, wall {r['wall_s'] * 1e3:.1f} ms", flush=True)
    return r


def main() -> None:
    tag = sys.argv[1] if len(sys.argv) > 1 else "run"
    rows = []
    for name in os.environ.get("MODELS", "llama-3.1-8b-instruct,qwen3-30b-a3b-4bit").split(","):
        rows += chunk_calls(name, tuple(int(n) for n in os.environ.get("TOKENS", "1023,2048").split(",")))
    doc = {"mlx": mx.__version__, "device": str(mx.default_device()), "tag": tag, "rows": rows}
    Path(os.environ.get("OUT", "."), f"cold-chunks-{tag}.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
