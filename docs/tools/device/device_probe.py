"""Probe MLX-CUDA memory behaviour that the calibration sweep cannot separate (writes JSON lines).

1. ``quantize``: active/peak around each op of one ``QuantizedKVCache`` prefill update.
2. ``commit``: one growth-heavy scenario under several ``MLX_MAX_OPS_PER_BUFFER`` values (a
   subprocess each, 3 repeats), to check the simulator's command-buffer commit model.
3. ``matmul``: the peak of one ``q @ k.T`` and one ``probs @ v`` (the fallback attention's matmuls)
   above their inputs and output, over key lengths, dtypes and head widths: the cuBLASLt workspace
   MLX allocates and holds until the command buffer completes (``mlx/backend/cuda/utils.cpp``).
4. ``graphs``: calibration scenarios (by id, from the data files) with ``MLX_SAVE_CUDA_GRAPHS_DOT_FILE``
   set, a subprocess each: every committed CUDA graph as a dot file, and which files each step
   committed (``steps.json``), packed into ``$OUT/graphs.tar.xz``; ``graphs-summary DIR`` turns
   them into one JSON line per scenario: the nodes of each graph each step committed, the
   commit boundaries the simulator's command-buffer model is checked against
   (``tests/test_cuda_graphs.py``).
5. ``workspace[-align|-random] [SECONDS]``: the same measurement over a grid of shapes, within a time budget:
   ``probs @ v`` (single-head first, then batched), ``q @ k.T``, and ``mx.fast.scaled_dot_product_attention``
   where cuDNN or the vector kernel serves it; the workspace a library call takes, and how it scales
   (``-align``: key rows that are not a multiple of 8; ``-random``: single-head shapes drawn at random).
6. ``workspace-stack``: N independent matmuls of one shape in one ``mx.eval`` (as N layers' attention
   in one command buffer), N = 1..32: whether their workspaces add up until the buffer completes.
Usage: ``python docs/tools/device/device_probe.py quantize|commit [OPS]|matmul|workspace[-align|-random|-stack] [S]|graphs ID...|graphs-summary DIR``.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

SCENARIO = {
    "id": "probe", "model": {"n_layers": 12, "kv_heads": 8, "head_dim": 128, "dtype": "float16"},
    "policy": {"name": "step", "step": 256},
    "workload": {"prompt_tokens": 2000, "prefill_chunk": 512, "decode_tokens": 600, "batch": 1},
}


def quantize_probe() -> None:
    import mlx.core as mx

    def mark(label: str) -> None:
        mx.synchronize()
        print(json.dumps({"probe": "quantize", "at": label, "active": mx.get_active_memory() - base,
                          "peak": mx.get_peak_memory() - base, "cache": mx.get_cache_memory()}), flush=True)
        mx.reset_peak_memory()

    mx.clear_cache()
    pool = mx.random.normal((1, 2, 300, 128)).astype(mx.float16)
    mx.eval(pool)
    mx.synchronize()
    mx.clear_cache()
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    k = pool * 0.5
    mx.eval(k)
    mark("multiply")
    q = mx.quantize(k, group_size=64, bits=8)
    mx.eval(q)
    mark("quantize")
    del k
    mark("del k")
    z = (mx.zeros((1, 2, 512, 32), mx.uint32), mx.zeros((1, 2, 512, 2), mx.float16), mx.zeros((1, 2, 512, 2), mx.float16))
    mx.eval(z)
    mark("zeros")
    for i in range(3):
        z[i][..., :300, :] = q[i]
    mx.eval(z)
    mark("slice_update")
    k2 = pool * 0.5
    q2 = mx.quantize(k2, group_size=64, bits=8)
    del k2
    mx.eval(q2)
    mark("multiply+quantize lazily")


def commit_probe(ops: str | None) -> None:
    if ops is None:
        for value in ("1", "10", "50", "100", "100000"):
            for _ in range(3):
                subprocess.run([sys.executable, __file__, "commit", value], check=False,
                               env={**os.environ, "MLX_MAX_OPS_PER_BUFFER": value})
        return
    from kvsim.calibration.measure import run_reference
    from kvsim.scenario.parse import parse_scenario

    m = run_reference(parse_scenario(SCENARIO))
    print(json.dumps({"probe": "commit", "max_ops": int(ops), "peak": m.peak_bytes,
                      "step_peaks": [s.peak_bytes for s in m.steps if s.peak_bytes > 1.2 * s.active_bytes]}), flush=True)


def matmul_probe() -> None:
    import mlx.core as mx

    dtypes = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}
    for dtype in ("float32", "bfloat16"):
        for heads, q_rows, head_dim in ((1, 300, 256), (8, 512, 128), (2, 777, 256), (8, 1, 256)):
            for k_rows in (300, 600, 900, 1200, 1500, 1800, 2400, 3000, 3600):
                q = mx.random.normal((1, heads, q_rows, head_dim)).astype(dtypes[dtype])
                k = mx.random.normal((1, heads, k_rows, head_dim)).astype(dtypes[dtype])
                mx.eval(q, k)
                for name, (a, b) in (("qk", (q, k.swapaxes(-1, -2))), ("pv", (None, k))):
                    if a is None:  # probs @ v: probs is (1, heads, q_rows, k_rows)
                        a = mx.softmax(q @ k.swapaxes(-1, -2), axis=-1)
                        mx.eval(a)
                    mx.synchronize()
                    mx.clear_cache()
                    base = mx.get_active_memory()
                    mx.reset_peak_memory()
                    out = a @ b
                    mx.eval(out)
                    mx.synchronize()
                    extra = mx.get_peak_memory() - base - out.nbytes
                    print(json.dumps({"probe": "matmul", "op": name, "dtype": dtype, "heads": heads, "q_rows": q_rows,
                                      "k_rows": k_rows, "head_dim": head_dim, "out_bytes": out.nbytes,
                                      "peak_above_inputs_and_output": extra, "mlx": mx.__version__}), flush=True)
                    del out


WORKSPACE_ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
WORKSPACE_KEYS = (16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
WORKSPACE_MAX_ELEMENTS = 1 << 29


def _workspace_once(mx: object, op: str, dtype: str, bh: int, q_rows: int, k_rows: int, head_dim: int) -> None:
    """One op's peak above its inputs (``pv``, ``qk`` or ``sdpa``), as a JSON line."""
    dt = getattr(mx, dtype)
    if op == "pv":
        a, b = mx.ones((1, bh, q_rows, k_rows), dt), mx.ones((1, bh, k_rows, head_dim), dt)
        inputs: tuple = (a, b)
    else:
        inputs = (mx.ones((1, bh, q_rows, head_dim), dt), mx.ones((1, bh, k_rows, head_dim), dt),
                  mx.ones((1, bh, k_rows, head_dim), dt))
    mx.eval(*inputs)
    mx.synchronize()
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    if op == "pv":
        out = inputs[0] @ inputs[1]
    elif op == "qk":
        out = inputs[0] @ inputs[1].swapaxes(-1, -2)
    else:
        out = mx.fast.scaled_dot_product_attention(*inputs, scale=1.0, mask="causal" if q_rows > 1 else None)
    mx.eval(out)
    mx.synchronize()
    print(json.dumps({"probe": "workspace", "op": op, "dtype": dtype, "batch_heads": bh, "q_rows": q_rows,
                      "k_rows": k_rows, "head_dim": head_dim, "out_bytes": out.nbytes,
                      "peak_above_inputs": mx.get_peak_memory() - base, "mlx": mx.__version__}), flush=True)


def _offsets(bases: tuple[int, ...]) -> tuple[int, ...]:
    """Each base and three misaligned neighbours (+1, +2, +4 rows: 2-, 4- and 8-byte row pitches in half types)."""
    return tuple(b + d for b in bases for d in (0, 1, 2, 4))


WORKSPACE_GRIDS = {  # op, dtypes, batch x heads, head dims, query rows, key rows
    "workspace": [
        ("pv", ("float32", "float16", "bfloat16"), (1,), (64, 128, 256, 512, 80), WORKSPACE_ROWS, WORKSPACE_KEYS),
        ("sdpa", ("bfloat16", "float16"), (1, 8, 32), (64, 128), (1, 2, 4, 32, 200, 512), (64, 512, 1024, 1025, 4096)),
        ("pv", ("float32", "bfloat16"), (2, 8, 32), (64, 128, 256), WORKSPACE_ROWS[::2], WORKSPACE_KEYS[::2]),
        ("qk", ("float32", "bfloat16"), (1, 8), (64, 256), WORKSPACE_ROWS[::3], WORKSPACE_KEYS[::3]),
    ],
    # key rows off a multiple of 8: cuBLASLt picks other kernels for rows not 16-byte aligned
    "workspace-align": [
        ("pv", ("float16", "float32", "bfloat16"), (1,), (512, 256, 128, 64),
         (1, 2, 4, 8, 16, 32, 35, 64, 128, 140, 256, 300, 512, 777, 1024),
         _offsets((16, 64, 256, 512, 1024, 1536, 2048, 3072, 4096, 8192, 16384))),
        ("qk", ("float16", "float32"), (1,), (512, 256, 64), (4, 16, 35, 140, 300, 777),
         _offsets((16, 64, 256, 1024, 2048, 4096, 8192))),
        ("pv", ("float32", "float16"), (2, 8), (128, 256), (4, 35, 140, 300, 777), _offsets((64, 512, 2048, 8192))),
    ],
}


def _random_shapes(seed: int, count: int) -> list[tuple[str, str, int, int, int, int]]:
    """Single-head matmul shapes drawn log-uniformly: 1-2,048 query rows, 16-32,768 key rows."""
    import random

    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        op = "pv" if rng.random() < 0.75 else "qk"
        q_rows = max(1 if op == "pv" else 2, round(math.exp(rng.uniform(0, math.log(2048)))))
        k_rows = round(math.exp(rng.uniform(math.log(16), math.log(32768))))
        shapes.append((op, rng.choice(("float16", "bfloat16", "float32")), 1, q_rows, k_rows,
                       rng.choice((64, 128, 256, 512))))
    return shapes


def workspace_probe(grid: str, seconds: float) -> None:
    """Peak of one op above its inputs, over a grid of attention shapes (``workspace-random``:
    40,000 drawn ones), until ``seconds`` run out."""
    import itertools
    import time

    import mlx.core as mx

    deadline = time.monotonic() + seconds
    mx.set_cache_limit(0)
    if grid == "workspace-random":
        shapes = _random_shapes(20261129, 40_000)
    else:
        shapes = [(op, dtype, bh, q, k, hd) for op, dts, bhs, dims, rows, keys in WORKSPACE_GRIDS[grid]
                  for dtype, bh, hd, q, k in itertools.product(dts, bhs, dims, rows, keys)]
    for op, dtype, bh, q_rows, k_rows, head_dim in shapes:
        if bh * q_rows * max(k_rows, head_dim) > WORKSPACE_MAX_ELEMENTS:
            continue
        if time.monotonic() > deadline:
            print(json.dumps({"probe": "workspace", "stopped": op, "reason": "time"}), flush=True)
            return
        _workspace_once(mx, op, dtype, bh, q_rows, k_rows, head_dim)


STACK_SHAPES = (  # op, dtype, q_rows, k_rows, head_dim: single-head shapes whose one-op workspace is not 0
    ("pv", "bfloat16", 250, 750, 512), ("pv", "bfloat16", 229, 734, 512), ("qk", "bfloat16", 75, 3075, 512),
    ("pv", "float16", 300, 1026, 512), ("pv", "float16", 777, 1537, 256), ("pv", "bfloat16", 140, 1537, 512),
)


def workspace_stack_probe() -> None:
    """Peak above the inputs of N independent matmuls of one shape evaluated together, per N."""
    import mlx.core as mx

    mx.set_cache_limit(0)
    for op, dtype, q_rows, k_rows, head_dim in STACK_SHAPES:
        dt = getattr(mx, dtype)
        for n in (1, 2, 4, 8, 16, 32):
            if op == "pv":
                pairs = [(mx.ones((1, 1, q_rows, k_rows), dt), mx.ones((1, 1, k_rows, head_dim), dt)) for _ in range(n)]
            else:
                pairs = [(mx.ones((1, 1, q_rows, head_dim), dt), mx.ones((1, 1, k_rows, head_dim), dt)) for _ in range(n)]
            mx.eval(pairs)
            mx.synchronize()
            base = mx.get_active_memory()
            mx.reset_peak_memory()
            outs = [a @ b if op == "pv" else a @ b.swapaxes(-1, -2) for a, b in pairs]
            mx.eval(outs)
            mx.synchronize()
            print(json.dumps({"probe": "workspace-stack", "op": op, "dtype": dtype, "batch_heads": 1, "q_rows": q_rows,
                              "k_rows": k_rows, "head_dim": head_dim, "n": n, "out_bytes": outs[0].nbytes,
                              "peak_above_inputs": mx.get_peak_memory() - base, "mlx": mx.__version__}), flush=True)
            del pairs, outs


def graphs_probe(ids: list[str]) -> None:
    import glob
    import tarfile

    out = os.environ.get("OUT", "/tmp")
    root = os.path.join("/tmp", "graphs")
    found = {}
    for path in sorted(glob.glob("data/*/mlx-cuda-*.jsonl")):
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("kind") == "measurement" and rec["id"] in ids:
                    found.setdefault(rec["id"], rec["scenario"])
    for sid in ids:
        d = os.path.join(root, sid)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "scenario.json"), "w") as f:
            json.dump(found[sid], f)
        r = subprocess.run([sys.executable, __file__, "graphs-child", d], check=False, capture_output=True, text=True,
                           env={**os.environ, "MLX_SAVE_CUDA_GRAPHS_DOT_FILE": os.path.join(d, "g")}, timeout=300)
        print(sid, r.returncode, len(os.listdir(d)), r.stderr[-300:], flush=True)
    with tarfile.open(os.path.join(out, "graphs.tar.xz"), "w:xz") as tar:
        tar.add(root, arcname="graphs")


def graphs_child(d: str) -> None:
    import kvsim.calibration.measure as measure
    from kvsim.scenario.parse import parse_scenario

    marks: list[int] = []  # dot files written before the first step, then after each step

    def dots() -> int:
        return len([n for n in os.listdir(d) if n.endswith(".dot")])

    class Marked:  # mlx.core, with a mark of the dot files written so far after each synchronize
        def __init__(self, mx: object) -> None:
            self._mx = mx

        def __getattr__(self, name: str) -> object:
            return getattr(self._mx, name)

        def synchronize(self) -> None:
            self._mx.synchronize()
            marks.append(dots())

    inner = measure._measure_steps
    measure._measure_steps = lambda mx, *args: (marks.append(dots()), inner(Marked(mx), *args))[1]
    with open(os.path.join(d, "scenario.json")) as f:
        m = measure.run_reference(parse_scenario(json.load(f)))
    with open(os.path.join(d, "steps.json"), "w") as f:
        json.dump({"marks": marks, "peaks": [s.peak_bytes for s in m.steps], "active": [s.active_bytes for s in m.steps],
                   "mlx": m.mlx_version, "device": measure.device_info()["device"].get("device_name", "")}, f)


def dot_node_count(text: str) -> int:
    """Nodes of one committed CUDA graph as MLX counts them: a child graph (a cuBLAS matmul) is one."""
    top = re.search(r'label="(graph_\d+)"', text)
    return len(re.findall(rf'"{top.group(1)}_node_\d+"\[', text)) if top else 0


def graphs_summary(root: str) -> None:
    """One JSON line per probed scenario: the node count of every graph each step committed."""
    for sid in sorted(os.listdir(root)):
        d = os.path.join(root, sid)
        if not os.path.exists(os.path.join(d, "steps.json")):
            continue
        with open(os.path.join(d, "steps.json")) as f:
            meta = json.load(f)
        marks = meta["marks"]
        with open(os.path.join(d, "scenario.json")) as f:
            scenario = json.load(f)
        counts = []
        for i in range(1, marks[-1] + 1):
            with open(os.path.join(d, f"g_{i}.dot")) as f:
                counts.append(dot_node_count(f.read()))
        steps = [counts[a:b] for a, b in zip(marks, marks[1:])]
        print(json.dumps({"probe": "graphs", "id": sid, "mlx": meta["mlx"], "device": meta["device"],
                          "scenario": scenario, "step_graph_nodes": steps}))


if __name__ == "__main__":
    if sys.argv[1] == "quantize":
        quantize_probe()
    elif sys.argv[1] == "matmul":
        matmul_probe()
    elif sys.argv[1] == "workspace-stack":
        workspace_stack_probe()
    elif sys.argv[1].startswith("workspace"):
        workspace_probe(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 240.0)
    elif sys.argv[1] == "graphs":
        graphs_probe(sys.argv[2:])
    elif sys.argv[1] == "graphs-child":
        graphs_child(sys.argv[2])
    elif sys.argv[1] == "graphs-summary":
        graphs_summary(sys.argv[2])
    else:
        commit_probe(sys.argv[2] if len(sys.argv) > 2 else None)
