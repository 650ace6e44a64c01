"""What each op of one forward allocates on MLX's CUDA backend, op by op (docs/generation.md, "gpt-oss-20b").

gpt-oss-20b's lone 2,000-token prompt peaked 15.1 GB above its weights on an H200, above every play of kvsim's
(11.8 GB at the latest frees), where its 1K prompt reads 5.7 GB, kvsim's point. This runs one prefill forward of a
config cut to its first ``--layers`` layers at full width, on random weights, with every op kvsim intercepts
(``kvsim.generation.trace``: ``MX_FUNCTIONS``, ``METHODS``, ``FAST_FUNCTIONS``) evaluated alone: its inputs first,
then ``mx.clear_cache()``, ``mx.reset_peak_memory()``, the op, ``mx.synchronize()``, and the peak above the active
memory before it. Compiled functions run op by op (``mx.disable_compile``); ``mx.fast`` ops run as MLX runs them
(not their fallbacks). Prints one JSON line per prompt length: ``ops``, a list of [op, bytes, output shapes].

    python3 docs/tools/device/op_bytes_cuda.py gpt-oss-20b --layers 2 --tokens 1024,2000
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def op_bytes(model: Any, tokens: int) -> list[list[Any]]:
    """[op, bytes it allocated evaluated alone, its outputs' shapes] for each intercepted call of one forward."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation import trace as tr
    from kvsim.generation.trace import _arrays

    cache = make_prompt_cache(model)
    log: list[list[Any]] = []
    depth = [0]

    def wrap(op: str, fn: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return fn(*args, **kwargs)
            ins = [*_arrays(args), *_arrays(list(kwargs.values()))]
            if ins:
                mx.eval(ins)
            depth[0] += 1
            try:
                out = fn(*args, **kwargs)
            finally:
                depth[0] -= 1
            outs = list(_arrays(out))
            if outs:
                mx.synchronize()
                mx.clear_cache()
                base = mx.get_active_memory()
                mx.reset_peak_memory()
                mx.eval(outs)
                mx.synchronize()
                log.append([op, max(mx.get_peak_memory() - base, 0), [list(o.shape) for o in outs]])
            return out

        return run

    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, attr: str, new: Any) -> None:
        saved.append((owner, attr, owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)))
        setattr(owner, attr, new)

    for op in tr.MX_FUNCTIONS:
        if hasattr(mx, op):
            patch(mx, op, wrap(op, getattr(mx, op)))
    for op in tr.METHODS:
        attr = mx.array.__dict__.get(op)
        if attr is not None:
            patch(mx.array, op, property(wrap(op, attr.fget)) if isinstance(attr, property) else wrap(op, attr))
    for op in tr.FAST_FUNCTIONS:
        patch(mx.fast, op, wrap("fast." + op, getattr(mx.fast, op)))
    mx.disable_compile()
    prompt = mx.zeros((1, tokens), mx.uint32)
    mx.eval(prompt)
    try:
        mx.eval(model(prompt, cache=cache))
    finally:
        mx.enable_compile()
        for owner, attr, old in reversed(saved):
            setattr(owner, attr, old)
    return log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tokens", default="1024,2000")
    args = ap.parse_args()
    import mlx.core as mx
    import mlx_lm
    from mlx.utils import tree_map

    from kvsim.generation.config import ModelConfig, load_model_config
    from kvsim.generation.model import build_model

    base = load_model_config(args.config)
    config = dict(base.config)  # full width, the first --layers layers (as gptoss4_evals.py)
    config["num_hidden_layers"] = args.layers
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:args.layers]
    mx.random.seed(0)
    model = build_model(ModelConfig(config, base.source), stand_in=False).model
    model.update(tree_map(mx.contiguous, model.parameters()))
    mx.eval(model.parameters())
    for tokens in map(int, args.tokens.split(",")):
        print(json.dumps({"config": args.config, "layers": args.layers, "tokens": tokens, "ops": op_bytes(model, tokens),
                          "mlx_version": mx.__version__, "mlx_lm_version": mlx_lm.__version__,
                          "device": mx.device_info().get("device_name")}), flush=True)


if __name__ == "__main__":
    main()
