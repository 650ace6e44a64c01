# ruff: noqa: E402, E741, B023  (analysis record: patches load before the kvsim modules they patch)
"""Analysis patch: every traced op's work carries its parts (W, an int), and run_eval logs each command buffer's ops.
Import before kvsim.generation.schedule is used. OPLOG: list of evals, each a list of buffers, each a list of
(cls, bytes, flops, out_elems, kernels)."""

import inspect

import mlx.core as mx

import kvsim.generation.trace as T
import kvsim.sim.eval_sim as E


class W(int):
    __slots__ = ()


INFO = {}  # id(W object) -> (cls, bytes, flops, out_elems); W objects kept alive in KEEP
KEEP = []
STATE = {"bits": None}


def w(total, cls, nbytes, flops, out_elems):
    x = W(total)
    INFO[id(x)] = (cls, nbytes, flops, out_elems)
    KEEP.append(x)
    return x


orig_op = T.Trace.op


def op(self, prim, inputs, out, donors=(), flops=0, strides=None, nbytes=None, bits=None):
    n = orig_op(self, prim, inputs, out, donors, flops, strides, nbytes, bits)
    # orig_op bound out to n; rebuild the parts of its work
    arr = self.graph.arrays[self.node_of[id(out)]]
    nb = (out.nbytes if nbytes is None else nbytes) + sum(self.graph.arrays[i].nbytes for i in inputs)
    cls = {
        "quantized_matmul": f"qmm{STATE['bits']}",
        "ScaledDotProductAttention": "att",
        "Matmul": "mm" + ("32" if out.dtype == mx.float32 else ""),
        "gather_mm": "gmm",
        "gather_qmm": "gqmm",
    }.get(prim, "other")
    if prim == "ScaledDotProductAttention" and not flops:
        pass
    arr.work_bytes = w(arr.work_bytes, cls, nb, flops, out.size)
    return n


T.Trace.op = op

# the fallback attention's two matmuls: their arithmetic
src = inspect.getsource(T._sdpa)
src = src.replace(
    'scores = g.op("Matmul", [scaled, g.view("Transpose", kn)], scores_bytes)',
    'scores = g.op("Matmul", [scaled, g.view("Transpose", kn)], scores_bytes)\n    _fl = 2 * b * hq * lq * lk * d\n    g.arrays[scores].work_bytes = w(g.arrays[scores].work_bytes, "fbmm", scores_bytes + q.nbytes + k.nbytes, _fl, b * hq * lq * lk)',
)
src = src.replace(
    't.bind(out, g.op("Matmul", [probs, vn], out.nbytes))',
    '_o = g.op("Matmul", [probs, vn], out.nbytes)\n    g.arrays[_o].work_bytes = w(g.arrays[_o].work_bytes, "fbmm", out.nbytes + scores_bytes + v.nbytes, _fl, out.size)\n    t.bind(out, _o)',
)
src = src.replace("def _sdpa(", "def _sdpa(").replace("    fused_attention", "    fused_attention")
ns = vars(T)
ns["w"] = w
# att flops always (so the class carries them)
src = src.replace('if "ScaledDotProductAttention" in t.kernel_bytes_per_flop else 0', "")
exec(src, ns)

orig_record = T._record


def _record(t, name, args, kwargs, out):
    if name.split(".")[-1] == "quantized_matmul":
        STATE["bits"] = kwargs.get("bits", 4) or 4
    try:
        return orig_record(t, name, args, kwargs, out)
    finally:
        STATE["bits"] = None


T._record = _record

OPLOG = []
esrc = inspect.getsource(E.run_eval)
esrc = esrc.replace(
    "        end = max(device_free_t, t) + open_work_s\n",
    "        end = max(device_free_t, t) + open_work_s\n        CUR.append(list(OPEN)); OPEN.clear()\n",
)
esrc = esrc.replace(
    "            open_work_s += work_s\n",
    "            open_work_s += work_s\n            _i = INFO.get(id(arr.work_bytes)); OPEN.append((_i[0], _i[1], _i[2], _i[3], kernels) if _i else ('other:' + arr.prim, max(int(arr.work_bytes), arr.nbytes + sum(arrays[x].nbytes for x in ins)) if FULL[0] and kernels else int(arr.work_bytes), 0, 0, kernels))\n",
)
esrc = esrc.replace(
    "    return {x: b for x, b in buf_of.items() if arrays[x].py_held}, end_t - start_t",
    "    OPLOG.append(list(CUR)); CUR.clear(); OPEN.clear()\n    return {x: b for x, b in buf_of.items() if arrays[x].py_held}, end_t - start_t",
)
en = vars(E)
FULL = [True]
en.update(CUR=[], OPEN=[], INFO=INFO, OPLOG=OPLOG, FULL=FULL)
exec(esrc, en)
import kvsim.generation.schedule as S

S.run_eval = en["run_eval"]
