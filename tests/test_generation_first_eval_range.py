"""A CUDA first eval's range centred on its point (``BackendProfile.model_first_eval_low_share``; ``docs/generation.md``,
"CUDA: a first eval's range centred on its point, and a twenty-seventh held-out set"): first evals land on both sides
of their fitted play, so the range puts half its width below the point, where a later eval's puts 0.375."""

from __future__ import annotations

import statistics

from cuda_runs import errors, outside, paired, profile_before_centred, remade, rows

from kvsim.generation.config import load_model_config
from kvsim.generation.model import build_model
from kvsim.generation.predict import Prediction, predict
from kvsim.generation.schedule import Workload
from kvsim.sim.profile import BackendProfile


def _predict(name: str, prompt_tokens: int, max_tokens: int, profile: BackendProfile | None = None) -> Prediction:
    return predict(build_model(load_model_config(name)), Workload(prompt_tokens, max_tokens, prefill_step_size=2048),
                   "mlx-cuda", profile=profile)


def test_pythia_at_2k_and_its_repeats_come_inside() -> None:
    """The stored run the range on the point missed (``heldout24``, pythia-160m at 2K: 0.787 GB, 2% under the bottom of
    0.804-1.077) and its six repeats in fresh processes (``repeat14``: 0.775, 0.882, 0.794; ``repeat15``: 0.900, 0.900,
    0.794): since a biased linear's arithmetic is counted over its input's last dimension (not its bias's, 4x too
    long in pythia's MLP), the point is 0.853 GB (+8.4%, was +14.0%) and the range holds all seven, centred or not."""
    runs = [next(r for r in rows("heldout24.jsonl") if r["name"] == "pythia-160m"), *rows("repeat14.jsonl"),
            *rows("repeat15.jsonl")]
    for profile in (None, profile_before_centred()):
        got = _predict("pythia-160m", 2048, runs[0]["max_tokens"], profile)
        assert [got.peak_low_bytes <= r["peak_bytes"] <= got.peak_high_bytes for r in runs] == [True] * 7
        assert got.peak_high_bytes / got.peak_low_bytes <= 1.35
        assert 0.08 < got.peak_bytes / runs[0]["peak_bytes"] - 1 < 0.09


def test_the_twenty_seventh_set_reads_as_it_was_predicted() -> None:
    """Eight one-chunk prompts (each its process's first eval), predicted before they were measured with the range
    centred (``predictions/heldout27.jsonl``) and with 0.375 of it below the point (``heldout27-e.jsonl``): the same
    points, 8 of 8 inside both ways, every error within 14%; the shipped profile remakes the centred file where no
    biased linear's arithmetic was counted over its bias (Llama-3.2-1B; pythia-160m's points fell since)."""
    centred, before = paired(27, ""), paired(27, "-e")
    assert outside(centred) == outside(before) == []
    assert errors(centred) == errors(before) and max(map(abs, errors(centred).values())) < 0.141
    assert 0.06 < statistics.median(map(abs, errors(centred).values())) < 0.07
    ours, stored = remade("llama-3.2-1b-instruct", "heldout27.jsonl")
    assert ours == stored


def test_the_twenty_eighth_set_reads_as_it_was_predicted() -> None:
    """Eight more one-chunk first evals, predicted both ways before they were measured: 8 of 8 inside both ways, every
    error within 2.3%. (pythia-160m's 2K repeats in fresh processes: ``test_pythia_at_2k_and_its_repeats_come_inside``.)"""
    centred, before = paired(28, ""), paired(28, "-e")
    assert outside(centred) == outside(before) == [] and max(map(abs, errors(centred).values())) < 0.023
