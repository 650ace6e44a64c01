# ruff: noqa: E402, E741, B023  (analysis record: patches load before the kvsim modules they patch)
"""Per traced chunk buffer: its ops' parts (ops.py) and the trace's device time; saved for offline fitting."""

import inspect
import json
import os
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pathlib import Path

import ops
from test_generation_chunk_trace import CONFIGS

CONFIGS.update(
    {
        "gemma1b": ("gemma-3-1b-it", 8192),
        "smol17": ("docs/tools/device/heldout8/smollm2-1.7b.json", 6144),
        "qwen06": ("qwen3-0.6b", 8192),
        "gemma4b": ("docs/tools/device/heldout9/gemma-3-4b-it.json", 8192),
    }
)
from cupti_trace import read_trace

import kvsim.generation.schedule as S
from kvsim.generation.config import load_model_config
from kvsim.generation.model import build_model
from kvsim.generation.schedule import Workload
from kvsim.sim.profile import load_profile

code = inspect.getsource(S.record).replace("if i in played or not _steppable(cache):", "if True:")
nss = dict(vars(S))
exec(code, nss)
record_all = nss["record"]
A = Path(os.environ.get("ARC", "data/generation/mlx-cuda-0.32.4/kernels/chunk-trace.tar.xz"))
p = load_profile("mlx-cuda")
out = []
for name in sys.argv[1:]:
    cfg, tokens = CONFIGS[name]
    built = build_model(load_model_config(cfg))
    rec = record_all(built, Workload(tokens, 2), p)
    ops.OPLOG.clear()
    ev = S.replay(rec, p).evals
    per = {e.offset: log for e, log in zip(ev, ops.OPLOG) if e.phase == "prefill"}
    tr = read_trace(A, name)
    for row in tr.timing:
        L, I = tr.within(row)
        k = min(per, key=lambda o: abs(o - row["offset"] - 2048))
        if len(per[k]) != len(L):
            continue
        for j, x in enumerate(L):
            out.append(
                {"name": name, "run": row["run"], "off": row["offset"], "j": j, "real": x[3] - x[2], "ops": per[k][j]}
            )
    print(name, "done", flush=True)
json.dump(out, open(os.environ.get("CAPOUT", "/tmp/timing_study/capture.json"), "w"))
