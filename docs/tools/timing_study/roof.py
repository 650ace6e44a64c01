# ruff: noqa: E402, E741, B023  (analysis record: patches load before the kvsim modules they patch)
import collections
import json
import os

import numpy as np
from scipy.optimize import least_squares

d = json.load(open(os.environ.get("CAP", "/tmp/timing_study/capture.json")))
if os.environ.get("RUN1"):
    d = [b for b in d if b["run"] == 1 or b["name"] == "fallback-ops"]
if os.environ.get("CHUNK"):
    g = {}
    for b in d:
        k = (b["name"], b["run"], b["off"]) if b["name"] != "fallback-ops" else (b["name"], b["j"])
        if k not in g:
            g[k] = {"name": b["name"], "run": b["run"], "off": b["off"], "j": 0, "real": 0.0, "ops": []}
        g[k]["real"] += b["real"]
        g[k]["ops"] += b["ops"]
    d = list(g.values())
cnt = collections.Counter(o[0] for b in d for o in b["ops"])
print(cnt)
GRID = {4: (28.2e-6, 131.5e12), 5: (41.8e-6, 100.8e12), 6: (42.8e-6, 90.9e12), 8: (28.5e-6, 165.7e12)}
# flatten
cls = [o[0] for b in d for o in b["ops"]]
byt = np.array([o[1] for b in d for o in b["ops"]], float)
fl = np.array([o[2] for b in d for o in b["ops"]], float)
oe = np.array([o[3] for b in d for o in b["ops"]], float)
ker = np.array([o[4] for b in d for o in b["ops"]], float)
seg = np.repeat(np.arange(len(d)), [len(b["ops"]) for b in d])
real = np.array([b["real"] for b in d])
isc = {c: np.array([x == c for x in cls]) for c in set(cls)}
qfix = np.array([GRID[int(c[3:])][0] if c.startswith("qmm") and c[3:] != "None" else 0 for c in cls])
qrate = np.array([GRID[int(c[3:])][1] if c.startswith("qmm") and c[3:] != "None" else 1 for c in cls])


def model(x, roof=True):
    bw, rmm, sq, ratt, catt, disp = np.exp(x)
    ft = np.zeros_like(fl)
    for c in ("mm", "fbmm", "mm32"):
        if c in isc:
            ft[isc[c]] = fl[isc[c]] / rmm
    q = np.array([c.startswith("qmm") for c in cls])
    ft[q] = (qfix[q] + fl[q] / qrate[q]) / sq
    if "att" in isc:
        ft[isc["att"]] = (catt if not os.environ.get("NOFIX") else 0) * oe[isc["att"]] * 1e-12 + fl[isc["att"]] / ratt
    t = ker * disp + (np.maximum(byt / bw, ft) if roof else byt / bw + ft)
    return np.bincount(seg, t, minlength=len(d))


x0 = np.log([2e12, 600e12, 1.0, 600e12, 30, 3e-6])
for roof in (True, False):
    for fix_bw in (None, 1.84e12):

        def res(x):
            if fix_bw:
                x = x.copy()
                x[0] = np.log(fix_bw)
            return np.log(model(x, roof) / real)

        r = least_squares(
            res, x0, bounds=(np.log([1e11, 1e13, 0.3, 1e13, 1e-3, 1e-7]), np.log([2e13, 2e15, 3, 2e15, 1e4, 1e-4]))
        )
        x = r.x.copy()
        if fix_bw:
            x[0] = np.log(fix_bw)
        e = np.abs(model(x, roof) / real - 1)
        bw, rmm, sq, ratt, catt, disp = np.exp(x)
        per = {
            n: round(
                float(
                    model(x, roof)[[i for i, b in enumerate(d) if b["name"] == n]].sum()
                    / real[[i for i, b in enumerate(d) if b["name"] == n]].sum()
                ),
                3,
            )
            for n in sorted({b["name"] for b in d})
        }
        w = np.argsort(-e)[:4]
        print(
            "   worst",
            [
                (
                    d[i]["name"],
                    d[i]["run"],
                    d[i]["off"],
                    d[i]["j"],
                    round(real[i] * 1e3, 2),
                    round(model(x, roof)[i] * 1e3, 2),
                )
                for i in w
            ],
        )
        print(
            f"roof={roof} bw={bw / 1e12:.2f}TB/s mm={rmm / 1e12:.0f}TF qscale={sq:.3f} att={ratt / 1e12:.0f}TF att_fixed={catt:.1f}ps/elem disp={disp * 1e6:.2f}us | median {np.median(e) * 100:.1f}% max {e.max() * 100:.1f}%",
            per,
        )
# bw fixed, fit on traced only, then read the fallback rows
if os.environ.get("BWFIX"):
    bwf = float(os.environ["BWFIX"])
    tr = np.array([b["name"] != "fallback-ops" for b in d])

    def res2(x):
        x = x.copy()
        x[0] = np.log(bwf)
        if os.environ.get("ATTFIX"):
            x[3] = np.log(float(os.environ["ATTFIX"]))
        return np.log(model(x, True) / real)[tr]

    r = least_squares(
        res2, x0, bounds=(np.log([1e11, 1e13, 0.3, 1e13, 1e-3, 1e-7]), np.log([2e13, 2e15, 3, 2e15, 1e4, 1e-4]))
    )
    x = r.x.copy()
    x[0] = np.log(bwf)
    if os.environ.get("ATTFIX"):
        x[3] = np.log(float(os.environ["ATTFIX"]))
    m = model(x, True)
    e = np.abs(m / real - 1)
    bw, rmm, sq, ratt, catt, disp = np.exp(x)
    print(
        f"BWFIX {bw / 1e12:.2f}: mm={rmm / 1e12:.0f}TF qscale={sq:.3f} att={ratt / 1e12:.0f}TF att_fixed={catt:.1f} disp={disp * 1e6:.2f}us traced median {np.median(e[tr]) * 100:.1f}% max {e[tr].max() * 100:.1f}%",
        {
            n: round(
                float(
                    m[[i for i, b in enumerate(d) if b["name"] == n]].sum()
                    / real[[i for i, b in enumerate(d) if b["name"] == n]].sum()
                ),
                3,
            )
            for n in sorted({b["name"] for b in d})
        },
    )
