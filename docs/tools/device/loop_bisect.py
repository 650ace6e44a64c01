"""Why does a prompt chunk peak lower in ``generate_step`` than in ``chunk_timing.py``? (docs/generation.md, "CUDA: an
eighteenth held-out set": Mistral-7B 6-bit's second 2,048-token chunk, 3.25 GB above its start in mlx-lm's loop, 7.86
in chunk_timing.py under mx.eval or mx.async_eval.)

One process per variant: the model built as ``kvsim.generation.measure`` builds it, then the prompt's chunks run by
``VARIANT`` and each chunk's peak above the memory held before it printed as one JSON line:

- ``generate``: mlx-lm's ``generate_step`` itself, ``mx.eval`` wrapped to read each chunk's peak (as ``eval_diff.py``);
- ``timing``: ``chunk_timing.py``'s loop (a 2-D prompt, ``mx.eval``, ``mx.synchronize()`` after);
- ``flat``: that loop on a 1-D prompt sliced as ``generate_step`` slices it;
- ``nosync``: that loop without the ``mx.synchronize()`` after each chunk;
- ``instream``: ``flat`` with the prompt sliced on ``generation_stream``, as ``generate_step`` slices it (the other
  loops slice on the default stream, so the model's first op reads another stream's output);
- ``default``: ``flat`` with everything on the default stream.

    python3 docs/tools/device/loop_bisect.py CONFIG --tokens 4096 --step 2048 --variant flat
"""

from __future__ import annotations

import argparse
import json


def chunks(variant: str, name: str, tokens: int, step: int) -> list[dict]:
    import mlx.core as mx
    from mlx_lm.generate import generate_step, generation_stream
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation.config import load_model_config
    from kvsim.generation.model import build_model

    mx.eval(mx.zeros(1))
    mx.random.seed(0)
    model = build_model(load_model_config(name), stand_in=False).model
    mx.eval(model.parameters())
    mx.synchronize()
    mx.clear_cache()
    flat = variant in ("generate", "flat", "instream", "default")
    prompt = mx.random.randint(0, 256, (tokens,) if flat else (1, tokens)).astype(mx.uint32)
    mx.eval(prompt)
    cache = make_prompt_cache(model)
    rows: list[dict] = []
    if variant == "generate":
        real_eval = mx.eval

        def wrapped(*args: object) -> None:
            held = mx.get_active_memory()
            mx.reset_peak_memory()
            real_eval(*args)
            rows.append({"peak_above_bytes": mx.get_peak_memory() - held, "held_bytes": held})

        mx.eval = wrapped
        next(generate_step(prompt, model, max_tokens=1, prompt_cache=cache, prefill_step_size=step))
        mx.eval = real_eval
        return [dict(r, variant=variant, chunk=i) for i, r in enumerate(rows[: (tokens - 2) // step + 1])]
    rest = prompt
    for i, start in enumerate(range(0, tokens - 1, step)):
        n = min(step, tokens - 1 - start)
        held = mx.get_active_memory()
        mx.reset_peak_memory()
        default = mx.default_stream(mx.default_device())
        stream = default if variant == "default" else generation_stream  # the model's
        with mx.stream(stream if variant in ("instream", "default") else default):  # the prompt slice's
            if flat:
                chunk, rest = rest[:n][None], rest[n:]
            else:
                chunk = prompt[:, start:start + n]
        with mx.stream(stream):
            model(chunk, cache=cache)
            mx.eval([c.state for c in cache])
        if variant != "nosync":
            mx.synchronize()
        rows.append({"variant": variant, "chunk": i, "peak_above_bytes": mx.get_peak_memory() - held,
                     "held_bytes": held})
        mx.clear_cache()
    return rows


def main() -> int:
    import mlx.core as mx

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--step", type=int, default=2048)
    ap.add_argument("--variant", choices=("generate", "timing", "flat", "nosync", "instream", "default"), default="timing")
    args = ap.parse_args()
    for row in chunks(args.variant, args.config, args.tokens, args.step):
        print(json.dumps({**row, "name": args.config, "mlx_version": mx.__version__}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
