"""The simulator's CUDA command buffers against the graphs MLX-CUDA really committed on an H200.

``data/probes/*-graphs-probe.jsonl`` holds, for calibration scenarios, the node count of every CUDA
graph each step committed (``docs/tools/device/device_probe.py graphs``, from ``MLX_SAVE_CUDA_GRAPHS_DOT_FILE``).
A command buffer commits once it holds more than ``commit_ops`` nodes, and its inputs are freed
when it completes: the boundaries decide which buffers a growth step still holds. The model's
graphs must commit the same nodes, graph for graph, in every step it plays in full (the prefill
chunks and the first decode step; a ``lowpeak`` step's barrier evals commit graphs of their own).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvsim.scenario.parse import parse_scenario
from kvsim.sim.engine import Engine
from kvsim.sim.profile import load_profile

PROBES = sorted(Path(__file__).resolve().parents[1].glob("data/probes/mlx-cuda-*-graphs-probe.jsonl"))
RECORDS = [json.loads(line) for path in PROBES for line in path.read_text().splitlines() if line.strip()]


def simulated_graph_nodes(record: dict) -> list[list[int]]:
    """Node counts of the graphs each of the first steps commits in the model (one list per step)."""
    scenario = parse_scenario(record["scenario"], backend="mlx-cuda")
    engine = Engine(scenario, replace(load_profile("mlx-cuda"), graph_nodes_per_kernel=1.0), record_events=False)
    steps = [*scenario.workload.prefill_tokens(), 1]
    commits: list[int] = []
    engine.eval_state.commit_nodes = commits
    out, start = [], 0
    for n in steps:
        commits.clear()
        engine.step(start, n)
        out.append(list(commits))
        start += n
    return out


def test_the_probe_data_is_there() -> None:
    assert len(RECORDS) >= 10
    assert all(r["device"] == "NVIDIA H200" and r["mlx"] == "0.32.4" for r in RECORDS)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r["id"])
def test_steps_commit_the_graphs_mlx_committed(record: dict) -> None:
    simulated = simulated_graph_nodes(record)
    assert simulated == record["step_graph_nodes"][: len(simulated)]
