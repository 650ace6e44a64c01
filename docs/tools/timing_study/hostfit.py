# ruff: noqa: E402, E741, B023  (analysis record: patches load before the kvsim modules they patch)
import json
import sys

import numpy as np

sys.path.insert(0, "tests")
from pathlib import Path

from cupti_trace import read_trace
from scipy.optimize import nnls

K = "data/generation/mlx-cuda-0.32.4/kernels/"
host = {}
for arc, names in (
    ("chunk-trace.tar.xz", ["q4", "mis6", "phi4", "llama8"]),
    ("device-time-trace.tar.xz", ["gemma1b", "smol17", "qwen06", "gemma4b"]),
):
    for n in names:
        tr = read_trace(Path(K + arc), n)
        for row in tr.timing:
            L, I = tr.within(row)
            if row["run"] == 1 and row["offset"] > 0 and L:
                host[(n, row["offset"])] = L[-1][0] - row["encode_start_s"]
d = json.load(open("/tmp/timing_study/capture_all.json"))
cnt = {}
for b in d:
    k = (b["name"], b["off"])
    if b["run"] != 1 or k not in host:
        continue
    c = cnt.setdefault(k, [0, 0, 0])
    for o in b["ops"]:
        c[0] += 1 if o[4] else 0
        c[1] += 0 if o[4] else 1
        c[2] += o[4]
keys = sorted(cnt)
X = np.array([cnt[k] for k in keys], float)
y = np.array([host[k] for k in keys])
for cols, lab in (([0, 1, 2], "op, view, kernel"), ([0, 2], "op, kernel"), ([2], "kernel"), ([0, 1], "op, view")):
    c, _ = nnls(X[:, cols], y)
    p = X[:, cols] @ c
    e = p / y - 1
    print(
        lab,
        (c * 1e6).round(2),
        "us; median |err|",
        round(float(np.median(np.abs(e))) * 100, 1),
        "% max",
        round(float(np.max(np.abs(e))) * 100, 1),
    )
    if lab == "op, view, kernel":
        for k, yy, pp in zip(keys, y, p):
            print("   ", k, round(yy * 1e3, 1), round(pp * 1e3, 1), cnt[k])
X1 = np.column_stack([np.ones(len(y)), X[:, 2]])
c, _ = nnls(X1, y)
p = X1 @ c
e = p / y - 1
print(
    "const + per kernel",
    (c * 1e6).round(1),
    "median",
    round(float(np.median(np.abs(e))) * 100, 1),
    "max",
    round(float(np.max(np.abs(e))) * 100, 1),
)
print(
    "constant only",
    round(float(np.median(y)) * 1e3, 1),
    "ms; median err",
    round(float(np.median(np.abs(np.median(y) / y - 1))) * 100, 1),
)
