# ruff: noqa: E402, E741, B023  (analysis record: patches load before the kvsim modules they patch)
"""Score a variant's stored-run plays: inside, point median; optionally re-range with SETS (json of profile fields)."""

import dataclasses
import json
import os
import statistics
import sys
from collections import namedtuple

from kvsim.generation.predict import gpu_peak
from kvsim.sim.profile import load_profile

E = namedtuple("E", "peak_bytes")
p = dataclasses.replace(load_profile("mlx-cuda"), **json.loads(os.environ.get("SETS", "{}")))
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f)]
seen = {}
for r in rows:
    seen[tuple(r["key"])] = r
rows = list(seen.values())
inside, errs, miss, q_in, d_in, nq, nd = 0, [], [], 0, 0, 0, 0
for r in rows:
    pl = r["plays"]
    gp = (
        gpu_peak(p, *[[E(x) for x in pl[k]] for k in ("fit", "low", "high", "floor")])
        if os.environ.get("SETS")
        else r["gp"]
    )
    point, lo, hi = gp
    real = r["real"]
    ok = lo <= real <= hi
    inside += ok
    errs.append(abs(point / real - 1))
    if r["bits"]:
        nq += 1
        q_in += ok
    else:
        nd += 1
        d_in += ok
    if not ok:
        miss.append(
            f"  {r['key'][0]}:{r['key'][1]} {r['name'].split('/')[-1]} {r['prompt']}:{r.get('step')} err {(point / real - 1) * 100:+.1f}% range {(lo / real - 1) * 100:+.1f}..{(hi / real - 1) * 100:+.1f}"
        )
print(
    f"{len(rows)} runs: inside {inside}, point median {statistics.median(errs) * 100:.2f}%, quantized {q_in}/{nq}, dense {d_in}/{nd}"
)
print("\n".join(sorted(miss)))
