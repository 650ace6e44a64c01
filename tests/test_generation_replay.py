"""A generation traced once and replayed under each timing equals a separate play under each (issue #17)."""

from __future__ import annotations

import pytest

from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.measure import scale_config
from kvsim.generation.model import build_model
from kvsim.generation.schedule import CLEAR, REPEAT, Workload, play, record, replay
from kvsim.sim.profile import load_profile

SMALL = {"hidden_size": 256, "intermediate_size": 768, "vocab_size": 8192}
WORKLOAD = Workload(1024, 300, prefill_step_size=256)
"""Four prefill chunks (one advanced untraced), a cache growth at 1,280 rows and the clear at 256 tokens."""


def _built(name: str):
    return build_model(ModelConfig(scale_config(load_model_config(name).config, 2, **SMALL), name))


@pytest.mark.parametrize("backend", ["mlx-cpu", "mlx-cuda", "mlx-metal"])
def test_replays_of_one_trace_equal_separate_plays(backend: str) -> None:
    """Every eval's peak, held state, cache and footprint, and the buffer cache left at the end, under the
    fitted timing and (GPU) its low, high and floor variants; the floor is traced with an infinite device rate
    (matmul flops left out of work bytes) when played alone, yet its replay of the shared trace is identical."""
    built = _built("qwen3-0.6b")
    profile = load_profile(backend)
    timings = [profile]
    if profile.is_gpu:
        timings += [profile.variant("low"), profile.variant("high"), profile.floor_variant()]
    recorded = record(built, WORKLOAD, profile)
    assert CLEAR in recorded.events and REPEAT in recorded.events
    for timing in timings:
        shared = replay(recorded, timing)
        alone, kv = play(built, WORKLOAD, timing)
        assert len(shared.evals) >= 4
        assert shared.evals == alone.evals
        assert (shared.carry.cache_bytes, shared.carry.repeat_footprint_bytes) == \
            (alone.carry.cache_bytes, alone.carry.repeat_footprint_bytes)
        assert recorded.kv_bytes == kv


def test_a_trace_replays_only_under_its_own_trace_settings() -> None:
    """A CUDA trace (CUDA's fused attention, its matmul rate) is not Metal's, nor the CPU's."""
    built = _built("qwen3-0.6b")
    recorded = record(built, Workload(64, 2), load_profile("mlx-cuda"))
    for backend in ("mlx-metal", "mlx-cpu"):
        with pytest.raises(ValueError, match="trace settings"):
            replay(recorded, load_profile(backend))


def test_only_the_first_eval_of_a_process_plays_a_cold_host() -> None:
    """``model_first_eval_host_node_s``: the process's first eval (the first prefill chunk) plays a slower host,
    so the device keeps up with it and frees sooner; every later eval plays as with a warm host throughout."""
    from dataclasses import replace

    built = build_model(ModelConfig(scale_config(load_model_config("qwen3-0.6b").config, 8, **SMALL), "qwen3-0.6b"))
    warm = replace(load_profile("mlx-cuda"), model_first_eval_host_node_s=0.0)
    cold = replace(warm, model_first_eval_host_node_s=200e-6)
    recorded = record(built, Workload(2048, 4, prefill_step_size=1024), warm)  # two chunks, then decode
    warm_evals, cold_evals = replay(recorded, warm).evals, replay(recorded, cold).evals
    assert cold_evals[0].peak_bytes < warm_evals[0].peak_bytes
    assert [e.peak_bytes for e in cold_evals[1:]] == [e.peak_bytes for e in warm_evals[1:]]
