"""What each op of one forward allocates on MLX's CUDA backend, op by op (docs/generation.md, "gpt-oss-20b").

gpt-oss-20b's lone 2,000-token prompt peaked 15.1 GB above its weights on an H200, above every play of kvsim's
(11.8 GB at the latest frees), where its 1K prompt reads 5.7 GB, kvsim's point. This runs one prefill forward of a
config cut to its first ``--layers`` layers at full width, on random weights, with every op kvsim intercepts
evaluated alone (``kvsim.generation.op_bytes``); ``mx.fast`` ops run as MLX runs them (not their fallbacks).
Prints one JSON line per prompt length: ``ops``, a list of [op, bytes, output shapes].

    python3 docs/tools/device/op_bytes_cuda.py gpt-oss-20b --layers 2 --tokens 1024,2000
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def op_bytes(model: Any, tokens: int) -> list[Any]:
    """[op, bytes it allocated evaluated alone, its outputs' shapes] for each intercepted call of one forward."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation.op_bytes import measuring_ops

    cache = make_prompt_cache(model)
    prompt = mx.zeros((1, tokens), mx.uint32)
    mx.eval(prompt)
    with measuring_ops(fast_fallbacks=False) as log:
        mx.eval(model(prompt, cache=cache))
    return [list(row) for row in log]


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
