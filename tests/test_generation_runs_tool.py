"""``docs/tools/generation_runs.py predict``: a held-out set's predictions, written before its runs are taken."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kvsim.generation.config import load_model_config
from kvsim.generation.model import build_model
from kvsim.generation.predict import predict
from kvsim.generation.schedule import Workload

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_predict_appends_kvsim_generates_prediction(tmp_path) -> None:
    out = tmp_path / "predictions.jsonl"
    out.write_text('{"kept": true}\n', encoding="utf-8")  # earlier predictions stay
    cmd = [sys.executable, str(REPO_ROOT / "docs" / "tools" / "generation_runs.py"), "predict", "--configs",
           "pythia-160m", "--workloads", "256:128:2", "--backend", "mlx-cpu", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO_ROOT)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows[0] == {"kept": True} and len(rows) == 2
    p = predict(build_model(load_model_config("pythia-160m")), Workload(256, 2, prefill_step_size=128), "mlx-cpu")
    assert rows[1]["peak_bytes"] == p.peak_bytes and rows[1]["weights_bytes"] == p.weights_bytes
    assert (rows[1]["prompt_tokens"], rows[1]["prefill_step_size"], rows[1]["max_tokens"]) == (256, 128, 2)
    assert rows[1]["profile_model_fields"]["model_max_active_tasks"] > 0
