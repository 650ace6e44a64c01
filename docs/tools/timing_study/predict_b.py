"""``generation_runs.py predict`` under candidate B: kvsim's profile fields for measured device and host times, as
``--set`` (``docs/generation.md``, "CUDA: the device's and the host's times per command buffer, traced"). The
twenty-second held-out set's ``heldout22-b.jsonl`` was made by this script's first version, which played B through
``cand.py``'s patches (in git history) before the fields existed; the fields give the same bytes
(``tests/test_generation_measured_times.py``). Arguments as ``generation_runs.py predict``'s.

    python docs/tools/timing_study/predict_b.py --configs C --workloads N:step:K --backend mlx-cuda --out FILE
"""

import os
import runpy
import sys

GRID = {4: (28.2e-6, 131.5e12), 5: (41.8e-6, 100.8e12), 6: (42.8e-6, 90.9e12), 8: (28.5e-6, 165.7e12)}
"""kernels/rates-qmm-grid.json fitted per bits: a time per call and a rate."""
IN_GRAPH = 1.125  # the grid's speed-up in a model's graph, fitted on eight traced models' warm chunks
B = {
    "model_op_time": "roofline", "model_device_bytes_per_s": 1.84e12, "matmul_flops_per_s": 846e12,
    "model_device_dispatch_s": 3.75e-6, "host_malloc_bytes_per_s": 4e11, "model_graph_cache_scope": "generation",
    "model_later_host": "true", "model_later_host_node_s": 0.0, "model_later_host_kernel_s": 24e-6,
    "model_later_host_low_factor": 1.25, "model_later_host_high_factor": 0.8, "model_later_host_sdpa_s": 0.0,
    "model_mlx_nodes": "false",  # one graph node per op, as B and D were predicted (candidate E turns it on)
    "model_first_eval_low_share": 0.0,  # a first eval's range 0.375 below its point, as B, D and E were predicted
    **{f"quantized_matmul_{b}bit_call_s": call_s / IN_GRAPH for b, (call_s, _) in GRID.items()},
    **{f"quantized_matmul_{b}bit_flops_per_s": rate * IN_GRAPH for b, (_, rate) in GRID.items()},
}



def predict_with(fields: dict, argv: list) -> None:
    """``generation_runs.py predict`` with ``argv`` under the profile fields ``fields``."""
    sys.argv = ["generation_runs.py", "predict", *argv, *(f"--set={k}={v}" for k, v in fields.items())]
    runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "generation_runs.py"), run_name="__main__")


if __name__ == "__main__":
    predict_with(B, sys.argv[1:])
