"""The stored CUDA generations (``data/generation/mlx-cuda-0.32.4``) and today's predictions of them: shared by the
tests that check held-out sets as they were predicted."""

from __future__ import annotations

import json

from kvsim.core.paths import REPO_DATA_DIR
from kvsim.generation.config import ModelConfig
from kvsim.generation.measure import row_workload
from kvsim.generation.model import build_model
from kvsim.generation.predict import Prediction, predict

RUNS = REPO_DATA_DIR / "generation" / "mlx-cuda-0.32.4"


def rows(name: str) -> list[dict]:
    """The JSON lines of ``RUNS / name`` (a split's runs, or ``predictions/...``)."""
    return [json.loads(line) for line in (RUNS / name).read_text(encoding="utf-8").splitlines()]


def predicted(runs: list[dict]) -> list[tuple[dict, Prediction]]:
    """Each stored run beside today's prediction of it."""
    return [(row, predict(build_model(ModelConfig(row["config"], row["name"])), row_workload(row), "mlx-cuda"))
            for row in runs]
