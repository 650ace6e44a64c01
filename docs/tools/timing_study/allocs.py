import json
import lzma
import tarfile

import numpy as np
from scipy.optimize import nnls

K = "data/generation/mlx-cuda-0.32.4/kernels/"
rows = []
for arc, names in (
    ("chunk-trace.tar.xz", ["q4", "mis6", "phi4", "llama8"]),
    ("device-time-trace.tar.xz", ["gemma1b", "smol17", "qwen06", "gemma4b"]),
):
    tar = tarfile.open(fileobj=lzma.open(K + arc))
    for n in names:
        timing = [
            json.loads(x)
            for x in tar.extractfile(f"timing-{n}.jsonl").read().decode().splitlines()
            if x.startswith("{")
        ]
        calls, enter, launches = [], {}, []
        for line in tar.extractfile(f"trace-{n}.txt").read().decode().splitlines():
            p = line.split()
            if p[0] == "A" and p[1] == "E":
                enter[p[3]] = int(p[4]) / 1e9
            elif p[0] == "A" and p[1] == "X":
                calls.append((p[3], enter[p[3]], int(p[4]) / 1e9))
        for t in timing:
            if t.get("run") != 1 or t["offset"] == 0:
                continue
            s = t["encode_start_s"]
            L = [c for c in calls if c[0] == "cuGraphLaunch" and s <= c[1] <= t["done_s"]]
            last = L[-1][1]
            A = [c for c in calls if c[0] == "cuMemAllocAsync" and s <= c[1] <= last]
            F = [c for c in calls if c[0] == "cuMemFreeAsync" and s <= c[1] <= last]
            rows.append((n, t["offset"], last - s, len(A), sum(b - a for _, a, b in A), len(F), len(L)))
for r in rows:
    print(
        r[0],
        r[1],
        "host ms",
        round(r[2] * 1e3, 1),
        "allocs",
        r[3],
        "alloc-call ms",
        round(r[4] * 1e3, 1),
        "frees",
        r[5],
        "launches",
        r[6],
    )
# kernels per chunk from kvsim's capture (run 1)
cap = json.load(open("/tmp/timing_study/capture_all.json"))
ker = {}
for b in cap:
    if b["run"] == 1:
        ker[(b["name"], b["off"])] = ker.get((b["name"], b["off"]), 0) + sum(o[4] for o in b["ops"])
R = [r for r in rows if (r[0], r[1]) in ker]
X = np.array([[ker[(r[0], r[1])], r[3]] for r in R], float)
y = np.array([r[2] for r in R])
c, _ = nnls(X, y)
p = X @ c
e = p / y - 1
print(
    "per kernel, per alloc call (us):",
    (c * 1e6).round(1),
    "median",
    round(float(np.median(np.abs(e))) * 100, 1),
    "max",
    round(float(np.max(np.abs(e))) * 100, 1),
)
for r, pp in zip(R, p):
    print("  ", r[0], r[1], round(r[2] * 1e3, 1), round(pp * 1e3, 1))
