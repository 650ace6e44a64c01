"""What-if: the 122B play with Metal's gated_delta_kernel stood in for the ops loop kvsim traces.

For docs/case-studies.md study 1; results in data/public/qwen3.5-122b-a10b-kvsim.json.

mlx-lm's gated_delta_update runs gated_delta_kernel on Metal (one kernel: inputs q, k, v, g, beta, state;
outputs y [B, T, Hv, Dv] in q's dtype and the new float32 state) and gated_delta_ops (a Python loop over
tokens) elsewhere; tracing runs on the CPU, so kvsim sees the loop. The stand-in keeps the kernel's
inputs alive until it runs and produces outputs of the kernel's shapes and dtypes.

Usage: .venv/bin/python docs/tools/qwen35_kernel_whatif.py CONFIG PROMPT_TOKENS OUT.json [STEP [POLICY]]
"""
import json
import sys
import time

import mlx.core as mx
import mlx_lm.models.gated_delta as gd

from kvsim.generation.config import load_model_config
from kvsim.generation.model import build_model
from kvsim.generation.schedule import Workload, play_generation
from kvsim.sim.profile import load_profile


def kernel_standin(q, k, v, g, beta, state=None, mask=None):
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[-2:]
    if state is None:
        state = mx.zeros((B, Hv, Dv, Dk), dtype=mx.float32)
    reads = (q.sum() + k.sum() + g.sum()).astype(v.dtype)   # the kernel reads q, k, g
    y = (v * beta[..., None].astype(v.dtype)) + reads         # y: [B, T, Hv, Dv], q's dtype
    return y, state * 1.0                                     # the new state: [B, Hv, Dv, Dk] float32


gd.gated_delta_ops = kernel_standin
cfg, prompt, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
step = int(sys.argv[4]) if len(sys.argv) > 4 else 2048
t0 = time.time()
built = build_model(load_model_config(cfg))
pol = sys.argv[5] if len(sys.argv) > 5 else None
cache = None
if pol:
    from policies.mlx import make_prompt_cache
    cache = make_prompt_cache(built.model, policy={"name": pol})
evals, kv = play_generation(built, Workload(prompt, 4096, prefill_step_size=step), load_profile("mlx-metal"), cache)
json.dump({"config": cfg, "prompt_tokens": prompt, "max_tokens": 4096, "prefill_step_size": step, "weights_bytes": built.weights_bytes,
           "final_kv_bytes": kv, "wall_s": round(time.time() - t0, 1), "standin": "gated_delta_kernel",
           "evals": [[e.phase, e.offset, e.tokens, e.peak_bytes, e.kv_before_bytes, e.kv_after_bytes] for e in evals]},
          open(out, "w"))
