"""Per-eval peaks of a real mlx-lm generation beside ``kvsim generate``'s, to find the first eval that differs.

The real run follows ``kvsim.generation.measure`` (random weights, ``generate_step``); every ``mx.eval`` and
``mx.async_eval`` mlx-lm makes is wrapped: ``mx.synchronize()`` and ``mx.reset_peak_memory()`` before,
``mx.synchronize()`` and ``mx.get_peak_memory()`` after (an ``async_eval`` thus completes before the next step
is built, so decode peaks lose the overlap of steps; prefill evals are synchronous anyway). The prediction plays
the same config and workload (``kvsim.generation.predict``); its evals are matched by phase and cache offset.

    python docs/tools/eval_diff.py gemma-3-1b-it --prompt 1024 --step 512 --max-tokens 8
    python docs/tools/eval_diff.py gemma-3-1b-it --layers-only   # one chunk, layer by layer

``--layers-only``: the first prefill chunk, evaluated layer by layer in real MLX (``mx.eval`` of each layer's
output, peaks above the active memory at its start) beside the simulator playing the same layer's subgraph.
Scaled as ``docs/tools/generation_runs.py`` scales its configs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generation_runs import SCALE, WIDTHS  # noqa: E402

from kvsim.generation.config import ModelConfig, load_model_config  # noqa: E402
from kvsim.generation.measure import scale_config  # noqa: E402


def scaled(name: str, layers: int) -> dict[str, Any]:
    """The config ``generation_runs.py measure`` runs for ``name``."""
    return scale_config(load_model_config(name).config, layers, **{**SCALE, **WIDTHS.get(name, {})})


def real_evals(name: str, config: dict[str, Any], prompt_tokens: int, step: int, max_tokens: int,
               seed: int = 0) -> tuple[list[tuple[str, int, int]], int]:
    """(phase, cache offset after the step's graph was built, peak bytes) of every eval of a real generation, and its overall peak."""
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation.model import build_model

    mx.random.seed(seed)
    model = build_model(ModelConfig(config, name), stand_in=False).model
    mx.eval(model.parameters())
    mx.synchronize()
    mx.clear_cache()
    prompt = mx.random.randint(0, 256, (prompt_tokens,)).astype(mx.uint32)
    mx.eval(prompt)
    cache = make_prompt_cache(model)
    rows: list[tuple[str, int, int]] = []
    overall = 0
    real_eval, real_async = mx.eval, mx.async_eval
    phase = ["prefill"]

    def offset() -> int:
        return next((c.offset for c in cache if isinstance(getattr(c, "offset", None), int)), 0)

    def wrapped(fn: Any) -> Any:
        def run(*args: Any) -> None:
            nonlocal overall
            after = offset()
            if fn is real_async:
                phase[0] = "first" if phase[0] == "prefill" else "decode"
            mx.synchronize()
            mx.reset_peak_memory()
            fn(*args)
            mx.synchronize()
            peak = mx.get_peak_memory()
            overall = max(overall, peak)
            if peak:
                rows.append((phase[0], after, peak))

        return run

    mx.eval, mx.async_eval = wrapped(real_eval), wrapped(real_async)
    try:
        for n, _ in enumerate(generate_step(prompt, model, max_tokens=max_tokens, prompt_cache=cache,
                                            prefill_step_size=step)):
            if n + 1 >= max_tokens:
                break
    finally:
        mx.eval, mx.async_eval = real_eval, real_async
    return rows, overall


def predicted_evals(name: str, config: dict[str, Any], prompt_tokens: int, step: int, max_tokens: int) -> list:
    from kvsim.generation.model import build_model
    from kvsim.generation.predict import predict
    from kvsim.generation.schedule import Workload

    p = predict(build_model(ModelConfig(config, name)), Workload(prompt_tokens, max_tokens, step), "mlx-cpu")
    return list(p.evals)


def cmd_evals(args: argparse.Namespace, config: dict[str, Any]) -> None:
    real, overall = real_evals(args.name, config, args.prompt, args.step, args.max_tokens)
    pred = predicted_evals(args.name, config, args.prompt, args.step, args.max_tokens)
    print(f"{'phase':8} {'offset':>7} {'real':>12} {'kvsim':>12} {'error':>8}")
    for phase, off, peak in real:
        match = next((e for e in pred if e.phase == phase and e.offset == off), None)
        p = match.peak_bytes if match else None
        err = f"{100 * (p / peak - 1):+.2f}%" if p else "-"
        print(f"{phase:8} {off:7d} {peak:12d} {p if p else '-':>12} {err:>8}")
    top = max(e.peak_bytes for e in pred)
    print(f"overall  real {overall}  kvsim {top}  {100 * (top / overall - 1):+.2f}%")


def cmd_layers(args: argparse.Namespace, config: dict[str, Any]) -> None:
    """One prefill chunk, layer by layer: real ``mx.eval`` per layer against the simulator's play of it."""
    from mlx.utils import tree_flatten
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation.model import build_model
    from kvsim.generation.schedule import Playback, generation_profile
    from kvsim.generation.trace import tracing
    from kvsim.sim.profile import load_profile

    rows = min(args.step, args.prompt - 1)
    results: dict[str, list[tuple[str, int]]] = {}
    for kind in ("real", "kvsim"):
        mx.random.seed(0)
        built = build_model(ModelConfig(config, args.name), stand_in=kind == "kvsim")
        model = built.model
        if kind == "real":
            mx.eval(model.parameters())
        tokens = mx.zeros((1, rows), mx.uint32)
        mx.eval(tokens)
        cache = make_prompt_cache(model)
        inner = _inner(model)
        steps = _layer_steps(inner, tokens, cache)
        out: list[tuple[str, int]] = []
        if kind == "real":
            for label, fn in steps:
                mx.synchronize()
                mx.clear_cache()
                base = mx.get_active_memory()
                mx.reset_peak_memory()
                y = fn()
                mx.eval(y)
                mx.synchronize()
                out.append((label, mx.get_peak_memory() - base))
        else:
            profile = generation_profile(load_profile("mlx-cpu"))
            with tracing(profile.sdpa_kernels, cpu=not profile.is_gpu) as t:
                pb = Playback(0, profile, t, cache)
                t.register_leaves([v for _, v in tree_flatten(model.parameters())])
                for label, fn in steps:
                    y = fn()
                    pb.on_eval([y] if isinstance(y, mx.array) else list(y))
                    e = pb.evals[-1]
                    out.append((label, e.peak_bytes - e.kv_before_bytes))
        results[kind] = out
    print(f"{'step':28} {'real':>12} {'kvsim':>12} {'error':>8}")
    for (label, r), (_, p) in zip(results["real"], results["kvsim"]):
        print(f"{label:28} {r:12d} {p:12d} {100 * (p / r - 1) if r else 0:+7.2f}%")


def _inner(model: Any) -> Any:
    for attr in ("model", "backbone", "transformer", "gpt_neox"):
        m = getattr(model, attr, None)
        if m is not None and (hasattr(m, "layers") or hasattr(m, "h")):
            return m
    language = getattr(model, "language_model", None)
    if language is not None:
        return _inner(language)
    raise SystemExit("--layers-only: cannot find the model's layers")


def _layer_steps(inner: Any, tokens: mx.array, cache: list[Any]) -> list[tuple[str, Any]]:
    """Closures that each compute one piece of the forward pass on the previous piece's evaluated output.
    Embedding, then each layer called with the model's own mask; masks are built as the model builds them."""
    from mlx_lm.models.base import create_attention_mask

    state: dict[str, Any] = {}
    embed = getattr(inner, "embed_tokens", None) or getattr(inner, "embeddings", None) or getattr(inner, "wte", None)

    def embed_step() -> mx.array:
        state["h"] = embed(tokens)
        return state["h"]

    steps = [("embed", embed_step)]
    for i, layer in enumerate(getattr(inner, "layers", None) or inner.h):
        def layer_step(i: int = i, layer: Any = layer) -> mx.array:
            h = state["h"]
            c = cache[i] if cache else None
            try:
                mask = create_attention_mask(h, c)
                y = layer(h, mask, c)
            except TypeError:
                y = layer(h, c)
            state["h"] = y[0] if isinstance(y, tuple) else y
            return state["h"]

        steps.append((f"layer {i} ({type(layer).__name__})", layer_step))
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="a shipped config name")
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--step", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--layers-only", action="store_true")
    args = parser.parse_args()
    config = scaled(args.name, args.layers)
    (cmd_layers if args.layers_only else cmd_evals)(args, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
