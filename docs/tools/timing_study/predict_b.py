"""``generation_runs.py predict`` under candidate B (``cand.py``'s patches in this process, its fields as ``--set``):
a held-out set's predictions, committed before its runs are measured. Arguments as ``generation_runs.py predict``'s.

    python docs/tools/timing_study/predict_b.py --configs C --workloads N:step:K --backend mlx-cuda --out FILE
"""

import os
import runpy
import sys

B = {"CAND": "1", "C_BW": "1.84e12", "C_MM": "846e12", "C_QS": "1.125", "C_ATT": "627e12", "C_DISP": "3.75e-6",
     "C_NODE": "0", "C_KERNEL": "24e-6", "C_SLOW": "1.25", "C_FAST": "0.8"}
for k, v in B.items():
    os.environ[k] = v
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cand  # noqa: E402  (patches kvsim before generation_runs imports it)

fields = {**cand.GLOBAL, "host_malloc_bytes_per_s": 4e11}
sys.argv = ["generation_runs.py", "predict", *sys.argv[1:], *(f"--set={k}={v}" for k, v in fields.items())]
runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "generation_runs.py"), run_name="__main__")
