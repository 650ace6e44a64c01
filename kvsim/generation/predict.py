"""``kvsim generate``'s prediction: a model and a workload in, the generation's memory out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvsim.generation.config import load_model_config
from kvsim.generation.model import BuiltModel, build_model
from kvsim.generation.schedule import EvalPeak, Workload, play_generation
from kvsim.sim.profile import load_profile


@dataclass(frozen=True, slots=True)
class Prediction:
    """What ``mx.get_peak_memory()`` reads after the generation, and its parts."""

    model: str
    """The config's source and ``model_type``."""
    backend: str
    workload: Workload
    policy: dict[str, Any] | None
    """The growth policy of the KV caches (``None``: mlx-lm's own caches)."""
    peak_bytes: int
    """Predicted peak of ``mx.get_peak_memory()`` over the generation, weights included."""
    weights_bytes: int
    """The parameters' bytes as mlx-lm builds the model."""
    kv_bytes: int
    """The caches' bytes at the end (``sum(c.nbytes)``)."""
    peak_kv_bytes: int
    """The caches' bytes after the step whose eval peaks."""
    peak_phase: str
    """``prefill``, ``first`` or ``decode``: the step that peaks."""
    peak_offset: int
    """Tokens the caches held when the peaking step ran."""
    evals: tuple[EvalPeak, ...]

    @property
    def transient_bytes(self) -> int:
        """The peak above weights and caches: the step's activations and any growth copy in flight."""
        return self.peak_bytes - self.weights_bytes - self.peak_kv_bytes

    def to_json(self) -> dict[str, Any]:
        w = self.workload
        return {
            "model": self.model, "backend": self.backend, "prompt_tokens": w.prompt_tokens,
            "max_tokens": w.max_tokens, "prefill_step_size": w.prefill_step_size, "max_kv_size": w.max_kv_size,
            "kv_bits": w.kv_bits, "kv_group_size": w.kv_group_size, "policy": self.policy,
            "peak_bytes": self.peak_bytes, "weights_bytes": self.weights_bytes, "kv_bytes": self.kv_bytes,
            "peak_kv_bytes": self.peak_kv_bytes, "transient_bytes": self.transient_bytes,
            "peak_phase": self.peak_phase, "peak_offset": self.peak_offset,
        }


def predict(built: BuiltModel, workload: Workload, backend: str = "mlx-cpu",
            policy: dict[str, Any] | None = None) -> Prediction:
    """Play the generation of ``workload`` on ``built`` through ``backend``'s profile."""
    cache = None
    if policy is not None:
        from policies.mlx import make_prompt_cache

        cache = make_prompt_cache(built.model, policy=policy)
    evals, kv = play_generation(built, workload, load_profile(backend), cache)
    top = max(evals, key=lambda e: e.peak_bytes)
    return Prediction(f"{built.config.source} ({built.config.model_type})", backend, workload, policy,
                      top.peak_bytes, built.weights_bytes, kv, top.kv_after_bytes, top.phase, top.offset,
                      tuple(evals))


def predict_model(model: str, workload: Workload, backend: str = "mlx-cpu",
                  policy: dict[str, Any] | None = None) -> Prediction:
    """``predict`` for a model named as ``kvsim generate --model`` takes it."""
    return predict(build_model(load_model_config(model)), workload, backend, policy)
