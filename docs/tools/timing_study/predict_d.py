"""``generation_runs.py predict`` under candidate D (``docs/generation.md``, "CUDA: each phase's peak, and a host
fitted per op class"): candidate B's measured device, and a process's later evals on a host timed per op class, fitted
(``scipy.optimize.nnls``) on the launch gaps of eight models' traced warm chunks: 9.3 us a graph node (views
included), 1.3 us more a kernel, 283 us more a fused attention (cuDNN's graph added as a child). That host is scaled
by ``HOST_SCALE``, fitted on train (train and its Gemma-3-1B repeats: the value nearest the traced pace that holds all
22 runs, on a grid of 1.0, 0.9, 0.8, 0.7, 0.65, 0.6, 0.5); the traced runs' host ran under CUPTI, which lowers
SmolLM2-1.7B's chunk peaks by about 1 GB (``kernels/chunk-timing-plain.jsonl``). Its range plays that host at the
fastest and slowest pace against its device the traced chunks showed beside kvsim's play (0.72 and 1.2).

    python docs/tools/timing_study/predict_d.py --configs C --workloads N:step:K --backend mlx-cuda --out FILE
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from predict_b import B, predict_with  # noqa: E402

HOST_SCALE = 0.6
D = {
    **B, "model_later_host_node_s": 9.3e-6 * HOST_SCALE, "model_later_host_kernel_s": 1.3e-6 * HOST_SCALE,
    "model_later_host_sdpa_s": 283e-6 * HOST_SCALE, "model_later_host_low_factor": 1.2,
    "model_later_host_high_factor": 0.72,
}

if __name__ == "__main__":
    predict_with(D, sys.argv[1:])
