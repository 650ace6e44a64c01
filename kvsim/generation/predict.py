"""``kvsim generate``'s prediction: a model and a workload in, the generation's memory out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvsim.generation.config import load_model_config
from kvsim.generation.model import BuiltModel, build_model
from kvsim.generation.schedule import EvalPeak, Workload, generation_profile, record, replay
from kvsim.sim.peak_range import first_eval_point, first_eval_range, point_estimate, profile_range
from kvsim.sim.profile import BackendProfile, load_profile

UNFUSED_NOTE_BYTES = 64 << 20
"""Scores a layer from which an unfused GPU attention earns a note (``Prediction.notes``): the fourth CUDA
held-out set's float32-attention runs missed their ranges from 67 MB (olmo-2-1b, 1K tokens) up."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """What ``mx.get_peak_memory()`` reads after the generation, and its parts; MLX's buffer cache and the
    process's resident footprint."""

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
    peak_low_bytes: int | None = None
    """GPU backends: the low end of the range a run's peak falls in (frees land asynchronously)."""
    peak_high_bytes: int | None = None
    cache_bytes: int = 0
    """``mx.get_cache_memory()`` after the generation: the freed buffers MLX keeps for reuse, those of the
    steps since mlx-lm's last ``mx.clear_cache()`` (after each prefill chunk, every 256 decode tokens)."""
    footprint_bytes: int = 0
    """What MLX holds at most: weights plus the largest active + cache bytes of any eval (>= ``peak_bytes``)."""
    baseline_bytes: int = 0
    """The process before the model: the profile's ``process_baseline_bytes`` (0: not measured)."""
    unfused_attention_bytes: int = 0
    """GPU backends: the largest scores of an attention the fused kernels do not serve (0: none)."""

    @property
    def notes(self) -> list[str]:
        """Where this prediction lies outside what the measured runs support, in one sentence each."""
        if self.unfused_attention_bytes < UNFUSED_NOTE_BYTES:
            return []
        return [f"Attention runs unfused on {self.backend} here (float32 queries, a head size the fused kernels "
                "do not take, or attention sinks under an array mask), with up to "
                f"{self.unfused_attention_bytes / 2**30:.2f} GiB of scores a layer: of the six such models measured "
                "at 8K tokens on an H200, five peaked inside their ranges and phi-2 19% above its point (gpt-oss-20b's "
                "one-chunk prompts of 1,408 to 3,000 tokens within 5.3% of theirs), so this peak is less certain."]

    @property
    def resident_bytes(self) -> int:
        """The process's resident footprint at its largest: the baseline plus what MLX holds."""
        return self.baseline_bytes + self.footprint_bytes

    @property
    def resident_cache_bytes(self) -> int:
        """The buffer cache's part of the footprint: what it holds above the peak's active bytes."""
        return max(self.footprint_bytes - self.peak_bytes, 0)

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
            "peak_phase": self.peak_phase, "peak_offset": self.peak_offset, "cache_bytes": self.cache_bytes,
            "resident_bytes": self.resident_bytes, "footprint_bytes": self.footprint_bytes, "notes": self.notes,
            "baseline_bytes": self.baseline_bytes, "resident_cache_bytes": self.resident_cache_bytes,
            **({"peak_low_bytes": self.peak_low_bytes, "peak_high_bytes": self.peak_high_bytes}
               if self.peak_low_bytes is not None else {}),
        }


def policy_cache(built: BuiltModel, policy: dict[str, Any] | None) -> list[Any] | None:
    """A fresh prompt cache of ``policy``'s drop-in caches for ``built`` (``None``: mlx-lm's own, which
    ``schedule.record`` makes)."""
    if policy is None:
        return None
    from policies.mlx import make_prompt_cache

    return make_prompt_cache(built.model, policy=policy)


def _tops(*plays: list[EvalPeak]) -> list[int]:
    """Each play's largest eval peak."""
    return [max(e.peak_bytes for e in evals) for evals in plays]


def gpu_peak(profile: BackendProfile, fitted: list[EvalPeak], early: list[EvalPeak], late: list[EvalPeak],
             floor: list[EvalPeak]) -> tuple[int, int, int]:
    """``(point, low, high)`` of a GPU generation from its evals under the fitted, earliest, latest and
    floor timings. Where the process's first eval peaks, its point is ``first_eval_point`` (or a later
    eval's, if higher) and the range is placed on that point (``first_eval_range``).
    A generation's range puts ``model_range_low_share`` of its width below the point (``generation_profile``)."""
    profile = generation_profile(profile)
    tops, weight = _tops(fitted, early, late, floor), profile.peak_point_weight
    low, high = profile_range(profile, *tops)
    point = point_estimate(*tops[:3], weight)
    if fitted[0].peak_bytes == tops[0] and profile.first_eval_point_share > 0:  # the first eval peaks
        later = point_estimate(*_tops(fitted[1:], early[1:], late[1:]), weight) if len(fitted) > 1 else 0.0
        first = first_eval_point(profile, floor[0].peak_bytes, fitted[0].peak_bytes)
        point = max(first, later)
        low, high = first_eval_range(profile, point, floor[0].peak_bytes)
    return int(point), int(low), int(high)


def predict(built: BuiltModel, workload: Workload, backend: str = "mlx-cpu",
            policy: dict[str, Any] | None = None, profile: BackendProfile | None = None) -> Prediction:
    """Play the generation of ``workload`` on ``built`` through ``backend``'s profile: traced once, played
    under the fitted timing and, on a GPU profile, under the range's three others. ``profile``: one to play instead
    of ``backend``'s shipped one (a candidate's fields, for a held-out set predicted under it)."""
    profile = profile or load_profile(backend)
    recorded = record(built, workload, profile, policy_cache(built, policy))
    pb = replay(recorded, profile)
    evals = pb.evals
    top = max(evals, key=lambda e: e.peak_bytes)
    peak, low, high = top.peak_bytes, None, None
    if profile.is_gpu:  # the range of kvsim.sim.peak_range: earliest, latest and floor free timings
        plays = [replay(recorded, p).evals for p in (profile.variant("low"), profile.variant("high"),
                                                     profile.floor_variant())]
        peak, low, high = gpu_peak(profile, evals, *plays)
    footprint = max(peak, built.weights_bytes + pb.carry.repeat_footprint_bytes,  # (a GPU point may exceed
                    *(e.footprint_bytes for e in evals))  # the fitted timing's own peak)
    return Prediction(f"{built.config.source} ({built.config.model_type})", backend, workload, policy,
                      peak, built.weights_bytes, recorded.kv_bytes, top.kv_after_bytes, top.phase, top.offset,
                      tuple(evals), low, high, pb.carry.cache_bytes, footprint, profile.process_baseline_bytes,
                      recorded.unfused_attention_bytes if profile.is_gpu else 0)


def predict_model(model: str, workload: Workload, backend: str = "mlx-cpu",
                  policy: dict[str, Any] | None = None) -> Prediction:
    """``predict`` for a model named as ``kvsim generate --model`` takes it."""
    return predict(build_model(load_model_config(model)), workload, backend, policy)
