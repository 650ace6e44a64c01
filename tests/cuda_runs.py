"""The stored CUDA generations (``data/generation/mlx-cuda-0.32.4``) and today's predictions of them: shared by the
tests that check held-out sets as they were predicted."""

from __future__ import annotations

import dataclasses
import json

from kvsim.core.paths import REPO_DATA_DIR
from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.measure import row_workload
from kvsim.generation.model import build_model
from kvsim.generation.predict import Prediction, predict
from kvsim.generation.schedule import Workload
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
    "model_first_eval_low_share": 0.0,  # as profile_before_centred
    **{f"quantized_matmul_{bits}bit_{rate}": 0.0 for bits in (4, 5, 6, 8) for rate in ("call_s", "flops_per_s")},
}
"""The CUDA profile's whole-model fields before candidate D was shipped (2026-12-03): the model every held-out set up
to the twenty-second was predicted under."""


def profile_before_centred(**fields: object) -> BackendProfile:
    """The shipped CUDA profile (with ``fields``) as it was before a first eval's range was centred on its point: 0.375
    of it below the point, as held-out sets up to the twenty-sixth were predicted."""
    return dataclasses.replace(load_profile("mlx-cuda"), model_first_eval_low_share=0.0, **fields)


def remade(name: str, file: str, profile: BackendProfile | None = None,
           prompt_tokens: int | None = None) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """kvsim's (point, low, high) under ``profile`` (default: shipped) beside a committed prediction's: the first row of
    ``predictions/<file>`` for config ``name`` (and ``prompt_tokens``, where given)."""
    stored = next(r for r in rows(f"predictions/{file}")
                  if r["name"] == name and prompt_tokens in (None, r["prompt_tokens"]))
    p = predict(build_model(load_model_config(name)), Workload(stored["prompt_tokens"], stored["max_tokens"],
                prefill_step_size=stored["prefill_step_size"]), "mlx-cuda", profile=profile)
    return ((p.peak_bytes, p.peak_low_bytes, p.peak_high_bytes),
            (stored["peak_bytes"], stored["peak_low_bytes"], stored["peak_high_bytes"]))


def profile_before_d() -> BackendProfile:
    return dataclasses.replace(load_profile("mlx-cuda"), **BEFORE_D)


def predicted(runs: list[dict], profile: BackendProfile | None = None) -> list[tuple[dict, Prediction]]:
    """Each stored run beside kvsim's prediction of it: today's, or under ``profile``."""
    return [(row, predict(build_model(ModelConfig(row["config"], row["name"])), row_workload(row), "mlx-cuda",
                          profile=profile)) for row in runs]


def paired(n: int, rule: str) -> dict[str, tuple[dict, dict]]:
    """Held-out set ``n``'s eight runs beside a committed prediction of each (``rule``: the file's suffix), by config
    and prompt."""
    stored = {(p["name"], p["prompt_tokens"]): p for p in rows(f"predictions/heldout{n}{rule}.jsonl")}
    pairs = {f"{r['name'].split('/')[-1].removesuffix('.json')}:{r['prompt_tokens']}":
             (r, stored[r["name"], r["prompt_tokens"]]) for r in rows(f"heldout{n}.jsonl")}
    assert len(pairs) == 8
    return pairs


def outside(pairs: dict[str, tuple[dict, dict]]) -> list[str]:
    """The keys of ``pairs`` whose run lies outside its predicted range."""
    return [k for k, (r, p) in pairs.items() if not p["peak_low_bytes"] <= r["peak_bytes"] <= p["peak_high_bytes"]]


def errors(pairs: dict[str, tuple[dict, dict]]) -> dict[str, float]:
    """Each pair's point error, predicted over real, less one."""
    return {k: p["peak_bytes"] / r["peak_bytes"] - 1 for k, (r, p) in pairs.items()}
