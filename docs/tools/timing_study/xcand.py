# ruff: noqa: E402, E741, B023  (analysis record: patches load before the kvsim modules they patch)
"""Stored CUDA runs under a variant: SCOPE=first|generation, LATER_MALLOC=<rate for evals after the process's first> (unset: as profile)."""

import dataclasses
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cand

import kvsim.generation.schedule as S
from kvsim.generation.config import ModelConfig
from kvsim.generation.measure import row_workload
from kvsim.generation.model import build_model
from kvsim.generation.predict import gpu_peak
from kvsim.sim.profile import load_profile

p = load_profile("mlx-cuda")
p = dataclasses.replace(p, **{**cand.GLOBAL, **json.loads(os.environ.get("GLOBAL", "{}"))})
LATER = {}
orig_play = S.Player.play


def play(self, rec):
    if not LATER or not self.evals:
        return orig_play(self, rec)
    keep = self.profile
    self.profile = dataclasses.replace(keep, **LATER)
    try:
        return orig_play(self, rec)
    finally:
        self.profile = keep


S.Player.play = play
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
