"""The stored CUDA generations (``data/generation/mlx-cuda-0.32.4``) and today's predictions of them: shared by the
tests that check held-out sets as they were predicted."""

from __future__ import annotations

import dataclasses
import json

from kvsim.core.paths import REPO_DATA_DIR
from kvsim.generation.config import ModelConfig
from kvsim.generation.measure import row_workload
from kvsim.generation.model import build_model
from kvsim.generation.predict import Prediction, predict
from kvsim.sim.profile import BackendProfile, load_profile

RUNS = REPO_DATA_DIR / "generation" / "mlx-cuda-0.32.4"


def rows(name: str) -> list[dict]:
    """The JSON lines of ``RUNS / name`` (a split's runs, or ``predictions/...``)."""
    return [json.loads(line) for line in (RUNS / name).read_text(encoding="utf-8").splitlines()]


BEFORE_D = {
    "model_mlx_nodes": False,
    "model_op_time": "sum", "model_device_bytes_per_s": 0.0, "model_device_dispatch_s": 0.0,
    "matmul_flops_per_s": 400e12, "model_host_malloc_bytes_per_s": 0.0, "model_graph_cache_scope": "first",
    "model_later_host": False, "model_later_host_node_s": 0.0, "model_later_host_kernel_s": 0.0,
    "model_later_host_sdpa_s": 0.0, "model_later_host_low_factor": 1.0, "model_later_host_high_factor": 1.0,
    **{f"quantized_matmul_{bits}bit_{rate}": 0.0 for bits in (4, 5, 6, 8) for rate in ("call_s", "flops_per_s")},
}
"""The CUDA profile's whole-model fields before candidate D was shipped (2026-12-03): the model every held-out set up
to the twenty-second was predicted under."""


def profile_before_d() -> BackendProfile:
    return dataclasses.replace(load_profile("mlx-cuda"), **BEFORE_D)


def predicted(runs: list[dict], profile: BackendProfile | None = None) -> list[tuple[dict, Prediction]]:
    """Each stored run beside kvsim's prediction of it: today's, or under ``profile``."""
    return [(row, predict(build_model(ModelConfig(row["config"], row["name"])), row_workload(row), "mlx-cuda",
                          profile=profile)) for row in runs]
