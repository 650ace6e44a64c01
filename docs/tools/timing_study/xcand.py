# ruff: noqa: E741  (analysis record)
"""Every stored CUDA run of FILES played under a candidate's profile fields: FIELDS (a JSON object of
``BackendProfile`` fields; default candidate B's, ``predict_b.B``). Writes the four plays and the predicted point
and range per run to OUTP (jsonl). The first version played the candidates through ``cand.py``'s patches (in git
history); the fields give the same bytes."""

import dataclasses
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from predict_b import B

import kvsim.generation.schedule as S
from kvsim.generation.config import ModelConfig
from kvsim.generation.measure import row_workload
from kvsim.generation.model import build_model
from kvsim.generation.predict import gpu_peak
from kvsim.sim.profile import load_profile

FIELDS = (
    json.loads(os.environ["FIELDS"])
    if os.environ.get("FIELDS")
    else {k: (v == "true") if v in ("true", "false") else v for k, v in B.items()}
)
p = dataclasses.replace(load_profile("mlx-cuda"), **FIELDS)
out = open(os.environ["OUTP"], "a")
seen = {}
ONLY = os.environ.get("MULTI")
for f in sys.argv[1:]:
    for i, l in enumerate(open(f)):
        r = json.loads(l)
        if ONLY and r["prompt_tokens"] - 1 <= r["prefill_step_size"]:
            continue
        k = hashlib.md5(
            json.dumps(
                [r["config"], r["prompt_tokens"], r["prefill_step_size"], r.get("max_tokens")], sort_keys=True
            ).encode()
        ).hexdigest()
        if k not in seen:
            built = build_model(ModelConfig(r["config"], r["name"]))
            rec = S.record(built, row_workload(r), p)
            plays = {
                n: S.replay(rec, q).evals
                for n, q in (
                    ("fit", p),
                    ("low", p.variant("low")),
                    ("high", p.variant("high")),
                    ("floor", p.floor_variant()),
                )
            }
            gp = gpu_peak(p, plays["fit"], plays["low"], plays["high"], plays["floor"])
            seen[k] = (built.weights_bytes, {n: [e.peak_bytes for e in v] for n, v in plays.items()}, gp)
        W, plays, gp = seen[k]
        q = r["config"].get("quantization") or r["config"].get("quantization_config") or {}
        out.write(
            json.dumps(
                {
                    "key": [os.path.basename(f), i],
                    "name": r["name"],
                    "prompt": r["prompt_tokens"],
                    "step": r["prefill_step_size"],
                    "bits": q.get("bits"),
                    "W": W,
                    "real": r["peak_bytes"],
                    "gp": gp,
                    "plays": plays,
                }
            )
            + "\n"
        )
        out.flush()
        print(os.path.basename(f), i, flush=True)
