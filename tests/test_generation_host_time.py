"""Whole-model host and device times apart from the KV workload's (``BackendProfile.model_host_*``,
``model_device_dispatch_s``; ``docs/generation.md``, "CUDA: run-to-run spread, the host's time per op"):
``generation_profile`` puts them in place, the range's ends take their own host, the floor none of the device's."""

from __future__ import annotations

from dataclasses import replace

from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.measure import scale_config
from kvsim.generation.model import build_model
from kvsim.generation.schedule import Workload, generation_profile, record, replay
from kvsim.sim.profile import load_profile

MEASURED = {"model_host_node_s": 2e-6, "model_host_kernel_s": 42e-6, "model_device_dispatch_s": 15e-6,
            "model_host_kernel_low_s": 66e-6, "model_host_kernel_high_s": 38e-6}
"""The rejected candidate of docs/generation.md (model time, about 1.9x real time on an H200)."""


def test_whole_model_fields_replace_the_kv_workloads_only_where_set() -> None:
    base = load_profile("mlx-cuda")
    assert generation_profile(base).host_kernel_s == base.host_kernel_s  # unset (0): the KV workload's
    p = generation_profile(replace(base, **MEASURED))
    assert (p.host_node_s, p.host_kernel_s, p.device_dispatch_s) == (2e-6, 42e-6, 15e-6)
    low, high = (generation_profile(replace(base, **MEASURED).variant(end)) for end in ("low", "high"))
    assert (low.host_kernel_s, high.host_kernel_s) == (66e-6, 38e-6)
    assert generation_profile(replace(base, **MEASURED).floor_variant()).device_dispatch_s == 0.0


def test_a_slower_host_runs_fewer_command_buffers_ahead() -> None:
    """The same traced prefill peaks no higher under a slower host (a first eval's and the later evals'), and lower
    once the host is the slow side."""
    config = scale_config(load_model_config("llama-3.2-1b-instruct").config, 6, hidden_size=512,
                          intermediate_size=2048, vocab_size=8192)
    built = build_model(ModelConfig(config, "llama-small"))
    profile = load_profile("mlx-cuda")
    rec = record(built, Workload(4096, 2, prefill_step_size=2048), profile)
    peaks = [max(e.peak_bytes for e in replay(rec, replace(profile, model_host_kernel_s=s,
                                                           model_later_host_kernel_s=s)).evals)
             for s in (4e-6, 40e-6, 400e-6)]
    floor = max(e.peak_bytes for e in replay(rec, profile.floor_variant()).evals)
    assert peaks[0] >= peaks[1] >= peaks[2] >= floor
    assert peaks[0] > peaks[2]
