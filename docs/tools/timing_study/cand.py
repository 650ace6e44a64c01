"""Analysis patch: the candidate device model (roofline, measured bandwidth, per-bits quantized matmuls, fitted rates)
and the traced later-eval host. Env CAND=1 to apply. Import before tracing."""

import dataclasses
import inspect
import math
import os

import kvsim.generation.schedule as S
import kvsim.generation.trace as T

BW = float(os.environ.get("C_BW", "1.84e12"))
RMM = float(os.environ.get("C_MM", "840e12"))
QS = float(os.environ.get("C_QS", "1.107"))
RATT = float(os.environ.get("C_ATT", "717e12"))
DISP = float(os.environ.get("C_DISP", "2.19e-6"))
GRID = {
    4: (28.2e-6, 131.5e12),
    5: (41.8e-6, 100.8e12),
    6: (42.8e-6, 90.9e12),
    8: (28.5e-6, 165.7e12),
    3: (28.2e-6, 131.5e12),
    2: (28.2e-6, 131.5e12),
}
STATE = {"bits": 4}
ROOF = os.environ.get("C_ROOF", "1") == "1"


def op(self, prim, inputs, out, donors=(), flops=0, strides=None, nbytes=None, bits=None):
    nbytes = out.nbytes if nbytes is None else nbytes
    moved = nbytes + sum(self.graph.arrays[i].nbytes for i in inputs)
    arith = 0.0
    if flops:
        if prim == "quantized_matmul":
            fixed, rate = GRID[STATE["bits"]]
            arith = (fixed + flops / rate) / QS * BW
        elif prim == "ScaledDotProductAttention":
            arith = flops / RATT * BW
        elif prim in ("gather_mm", "gather_qmm"):
            per = self.kernel_bytes_per_flop.get(prim, self.bytes_per_flop)
            arith = flops * per if math.isfinite(per) else 0
        else:
            arith = flops / RMM * BW
    work = int(max(moved, arith)) if ROOF else int(moved + arith)
    n = self.graph.op(prim, inputs, nbytes, kernels=self.kernels(prim, len(inputs)), work_bytes=work, donors=donors)
    return self.bind(out, n, strides or T.row_major(out.shape))


S_BPS = [1e12]
orig_record = T._record


def _record(t, name, args, kwargs, out):
    if name.split(".")[-1] == "quantized_matmul":
        STATE["bits"] = kwargs.get("bits", 4) or 4
    return orig_record(t, name, args, kwargs, out)


# the fallback attention's matmuls carry their arithmetic
src = inspect.getsource(T._sdpa)
src = src.replace(
    'scores = g.op("Matmul", [scaled, g.view("Transpose", kn)], scores_bytes)',
    'scores = g.op("Matmul", [scaled, g.view("Transpose", kn)], scores_bytes, work_bytes=int(max(scores_bytes + q.nbytes + k.nbytes, 2 * b * hq * lq * lk * d / RMM * BW)))',
)
src = src.replace(
    't.bind(out, g.op("Matmul", [probs, vn], out.nbytes))',
    't.bind(out, g.op("Matmul", [probs, vn], out.nbytes, work_bytes=int(max(out.nbytes + scores_bytes + v.nbytes, 2 * b * hq * lq * lk * d / RMM * BW))))',
)
# every kernel's bytes read and written
ssrc = inspect.getsource(T.subgraph).replace(
    "a.kernels, a.work_bytes,",
    "a.kernels, (max(a.work_bytes, a.nbytes + sum(arrays[i].nbytes for i in a.inputs)) if a.kernels else a.work_bytes),",
)
assert "arrays[i].nbytes for i in a.inputs" in ssrc
LATER = dict(
    host_malloc_bytes_per_s=0.0,
    host_node_s=float(os.environ.get("C_NODE", "12.8e-6")),
    host_kernel_s=float(os.environ.get("C_KERNEL", "7.9e-6")),
)
orig_play = S.Player.play


def play(self, rec):
    if not self.evals or os.environ.get("C_LATER", "1") != "1":
        return orig_play(self, rec)
    keep = self.profile
    m = keep.host_malloc_bytes_per_s
    f = (
        float(os.environ.get("C_SLOW", "1"))
        if m == keep.host_malloc_bytes_per_s_low and m != keep.host_malloc_bytes_per_s_high
        else (float(os.environ.get("C_FAST", "1")) if m == keep.host_malloc_bytes_per_s_high else 1.0)
    )
    self.profile = dataclasses.replace(
        keep, **{**LATER, "host_node_s": LATER["host_node_s"] * f, "host_kernel_s": LATER["host_kernel_s"] * f}
    )
    try:
        return orig_play(self, rec)
    finally:
        self.profile = keep


if os.environ.get("CAND") == "1":
    T.Trace.op = op
    T._record = _record
    ns = vars(T)
    ns.update(RMM=RMM, BW=BW)
    exec(src, ns)
    exec(ssrc, ns)
    S.subgraph = ns["subgraph"]
    S.Player.play = play
    GLOBAL = {
        "model_device_bytes_per_s": BW,
        "model_device_dispatch_s": DISP,
        "model_graph_cache_scope": os.environ.get("C_SCOPE", "generation"),
    }
else:
    GLOBAL = {}
