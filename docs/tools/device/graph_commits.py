"""Where MLX-CUDA cuts a real generation's evals into command buffers (CUDA graphs), and each eval's peak.

kvsim's CUDA floor (every command buffer's inputs freed when it is committed) lies above the measured peak of
bf16 Llama-3.2-1B's 1K prefill (0.44 against 0.15-0.20 GB above the weights), so either MLX commits more
often than its op limit (``CommandEncoder::needs_commit``, backend/cuda/device.cpp: more than
``MLX_MAX_OPS_PER_BUFFER`` graph nodes or ``MLX_MAX_MB_PER_BUFFER`` M input elements) or its buffers hold
less. MLX writes each committed graph to ``$MLX_SAVE_CUDA_GRAPHS_DOT_FILE_<n>.dot`` (``CommandEncoder::commit``),
so the files an eval leaves are its command buffers: this counts them, and the nodes and kernels in each.

Runs ``generate_step`` as ``kvsim.generation.measure`` does (random weights, full size); every ``mx.eval``
and ``mx.async_eval`` is wrapped: ``mx.synchronize()`` and ``mx.reset_peak_memory()`` before, and after it
``mx.synchronize()``, the peak above the active memory at its start, and the dot files it wrote. Prints one
JSON object; with ``--keep DIR`` the first ``--keep-evals`` evals' dot files are copied there. ``--warmup N`` runs
N short generations first (warm kernels); ``--eval-state`` evaluates the model's lazy state (``lazy_state``:
mlx-lm's RoPE frequencies, built on the default stream) before the generation, so no eval fences on it.

    MLX_SAVE_CUDA_GRAPHS_DOT_FILE=/tmp/dots/g python3 docs/tools/device/graph_commits.py llama-3.2-1b-instruct
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

NODE = re.compile(r'^\s*"?(\w+)"?\s*\[.*label="([^"]*)"', re.M)


def dot_nodes(text: str) -> list[str]:
    """The labels of a dot file's nodes (kernel nodes carry the kernel's name; a child graph's own nodes too)."""
    return [label for name, label in NODE.findall(text) if "->" not in name]


def kernel_name(label: str) -> str:
    """A short name for a node's label: the kernel function's name where it has one."""
    m = re.search(r"(?:void |\b)([A-Za-z_][\w:]*(?:<[^>]{0,40})?)\(", label)
    return (m.group(1) if m else label.split("\\n")[0])[:60]


def generate(model: Any, prompt_tokens: int) -> None:
    """A short generation, its results discarded."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    mx.eval(model.parameters())
    for n, _ in enumerate(generate_step(mx.zeros((prompt_tokens,), mx.uint32), model, max_tokens=2)):
        if n >= 1:
            break
    mx.synchronize()
    mx.clear_cache()


def run(args: argparse.Namespace) -> dict[str, Any]:
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation.config import load_model_config
    from kvsim.generation.model import build_model, lazy_state

    prefix = os.environ.get("MLX_SAVE_CUDA_GRAPHS_DOT_FILE")
    dots = Path(prefix).parent if prefix else None
    if dots:
        dots.mkdir(parents=True, exist_ok=True)
    for _ in range(args.warmup):  # kernels compiled and plans cached: a process's first eval is its own case
        generate(build_model(load_model_config(args.config), stand_in=False).model, prompt_tokens=64)
    mx.random.seed(0)
    built = build_model(load_model_config(args.config), stand_in=False)
    mx.eval(built.model.parameters())
    if args.eval_state:  # the model's lazy state (RoPE frequencies) evaluated up front: no stream fences
        mx.eval([a for a, _ in lazy_state(built.model)])
    mx.synchronize()
    mx.clear_cache()
    weights = mx.get_active_memory()
    prompt = mx.random.randint(0, 256, (args.prompt,)).astype(mx.uint32)
    mx.eval(prompt)
    cache = make_prompt_cache(built.model)
    evals: list[dict[str, Any]] = []
    real_eval, real_async = mx.eval, mx.async_eval

    def wrapped(fn: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            mx.synchronize()
            before = set(os.listdir(dots)) if dots else set()
            mx.reset_peak_memory()
            start = mx.get_active_memory()
            t0 = time.perf_counter()
            out = fn(*a, **k)
            mx.synchronize()
            row: dict[str, Any] = {"peak_above_start_bytes": max(mx.get_peak_memory() - start, 0),
                                   "start_above_weights_bytes": start - weights,
                                   "seconds": time.perf_counter() - t0}
            if dots:
                new = sorted(set(os.listdir(dots)) - before, key=lambda f: int(re.findall(r"\d+", f)[-1]))
                nodes = [dot_nodes((dots / f).read_text()) for f in new]
                row["commits"] = len(new)
                row["nodes_per_commit"] = [len(n) for n in nodes]
                if len(evals) < args.keep_evals:
                    row["kernels_per_commit"] = [[kernel_name(x) for x in n] for n in nodes]
                    if args.keep:
                        dest = Path(args.keep) / f"eval{len(evals)}"
                        dest.mkdir(parents=True, exist_ok=True)
                        for f in new:
                            shutil.copy(dots / f, dest / f)
                for f in new:
                    (dots / f).unlink()
            evals.append(row)
            return out
        return call

    mx.eval, mx.async_eval = wrapped(real_eval), wrapped(real_async)
    try:
        for n, _ in enumerate(generate_step(prompt, built.model, max_tokens=args.max_tokens, prompt_cache=cache,
                                            prefill_step_size=args.step)):
            if n + 1 >= args.max_tokens:
                break
    finally:
        mx.eval, mx.async_eval = real_eval, real_async
    mx.synchronize()
    return {"config": args.config, "prompt_tokens": args.prompt, "step": args.step, "max_tokens": args.max_tokens,
            "env": {k: v for k, v in os.environ.items() if k.startswith("MLX_")},
            "warmup": args.warmup, "eval_state": args.eval_state,
            "weights_bytes": weights, "peak_bytes": mx.get_peak_memory(), "evals": evals,
            "mlx_version": mx.__version__, "mlx_lm_version": mlx_lm.__version__,
            "device": mx.device_info().get("device_name")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--step", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=2)
    ap.add_argument("--keep", help="copy the first --keep-evals evals' dot files here")
    ap.add_argument("--keep-evals", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=0, help="short generations first, on models of their own")
    ap.add_argument("--eval-state", action="store_true", help="evaluate the model's lazy state first")
    print(json.dumps(run(ap.parse_args())))


if __name__ == "__main__":
    main()
