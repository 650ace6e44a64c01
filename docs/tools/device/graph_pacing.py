"""Does committing a CUDA graph wait for the device? (docs/generation.md, graph pacing)

A chain of synthetic "layers": ``h = x @ A`` (a large temporary), ``x = h @ B``. The command buffer that runs a
layer holds ``h`` and its input until the buffer completes (``gpu::eval``'s ``add_temporary``, MLX
backend/cuda/eval.cpp), so the memory held when the host loop ends counts the buffers still in flight.

Layer kinds differ by ``--period``: kind ``j`` also evaluates ``j`` tiny elementwise ops, so the committed graph's
structure, the key MLX caches its executable graphs under (``graph_nodes_key_ + ":" + graph_deps_key_``,
backend/cuda/device.cpp ``CommandEncoder::commit``), repeats every ``period`` layers. ``--shape-period`` varies
``A``'s width instead: the same key, other parameters. ``--one-eval`` evaluates the whole chain in one
``mx.eval`` (cut into buffers by ``MLX_MAX_OPS_PER_BUFFER``); otherwise each layer is one ``mx.async_eval``.

Prints one JSON line per pass: peak and held-at-loop-end memory above the start, in units of one layer's
temporaries, and the host loop's time against the whole pass's.

    MLX_USE_CUDA_GRAPHS=0 python3 docs/tools/device/graph_pacing.py --period 1
"""

from __future__ import annotations

import argparse
import json
import os
import time


def chain(args: argparse.Namespace) -> None:
    import mlx.core as mx

    rows, width, hidden, layers = args.rows, args.width, args.hidden, args.layers
    mx.random.seed(0)
    widths = [hidden - (j % args.shape_period) * 1024 for j in range(max(args.shape_period, 1))]
    dtype = mx.float32 if args.kind == "fp32" else mx.bfloat16
    a_mats = [mx.random.normal((width, w)).astype(dtype) * 0.01 for w in widths]
    b_mats = [mx.random.normal((w, width)).astype(dtype) * 0.01 for w in widths]
    x0 = mx.random.normal((rows, hidden if args.kind == "elementwise" else width)).astype(dtype)
    side0 = mx.zeros((16,))
    mx.eval(a_mats, b_mats, x0, side0)
    # h and the layer's input, held by its command buffer
    layer_bytes = rows * hidden * 6 if args.kind == "elementwise" else rows * (hidden + width) * dtype.size
    for run in range(args.runs):
        mx.synchronize()
        mx.clear_cache()
        start = mx.get_active_memory()
        mx.reset_peak_memory()
        x, host_ts = x0, []
        t0 = time.perf_counter()
        for i in range(layers):
            k = i % len(a_mats)
            if args.kind == "elementwise":  # an fp32 temporary no later op can take over (sizes differ)
                h = x.astype(mx.float32) * (1.0 + k)
                x = (h * 0.5).astype(mx.bfloat16)
            else:
                h = x @ a_mats[k]
                x = h @ b_mats[k]
            side = side0
            for _ in range(i % args.period):
                side = side + 1.0
            if not args.one_eval:
                mx.async_eval(x, side)
                host_ts.append(time.perf_counter() - t0)
        if args.one_eval:
            mx.eval(x)
        t_loop = time.perf_counter() - t0
        held = mx.get_active_memory() - start
        mx.synchronize()
        t_all = time.perf_counter() - t0
        peak = mx.get_peak_memory() - start
        print(json.dumps({
            "env": {k: v for k, v in os.environ.items() if k.startswith("MLX_")},
            "kind": args.kind, "period": args.period, "shape_period": args.shape_period, "one_eval": args.one_eval, "run": run,
            "layers": layers, "layer_bytes": layer_bytes, "host_loop_s": t_loop, "total_s": t_all,
            "held_at_loop_end_layers": held / layer_bytes, "peak_layers": peak / layer_bytes,
            "host_ts": [round(t, 5) for t in host_ts], "mlx": mx.__version__,
            "device": str(mx.default_device()),
        }), flush=True)
        del x, h


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--period", type=int, default=1, help="layers per repeat of the graph's structure")
    p.add_argument("--shape-period", type=int, default=1, help="layers per repeat of A's width (same structure)")
    p.add_argument("--kind", choices=("bf16", "fp32", "elementwise"), default="bf16",
                   help="layers of bf16 or fp32 matmuls, or of elementwise ops (no cuBLAS)")
    p.add_argument("--one-eval", action="store_true", help="the whole chain in one mx.eval")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=16384)
    p.add_argument("--runs", type=int, default=3)
    chain(p.parse_args())


if __name__ == "__main__":
    main()
