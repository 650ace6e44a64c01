"""``generation_runs.py predict`` under candidate E (``docs/generation.md``, "CUDA: a command buffer's nodes as MLX's
encoder makes them"): candidate D with each command buffer's graph nodes and copies as MLX's encoder makes them
(``BackendProfile.model_mlx_nodes``): a matmul over per-batch pointers is two nodes, an empty concatenation input copies
nothing, a primitive's copy of an input runs inside its eval.

    python docs/tools/timing_study/predict_e.py --configs C --workloads N:step:K --backend mlx-cuda --out FILE
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from predict_b import predict_with  # noqa: E402
from predict_d import D  # noqa: E402

E = {**D, "model_mlx_nodes": "true"}

if __name__ == "__main__":
    predict_with(E, sys.argv[1:])
