"""What holds a process's first eval on CUDA: MLX's task throttle, or the limit on command buffers in flight
(``docs/generation.md``, "CUDA: a first eval the task throttle bounds"; "CUDA: a first eval traced"; "CUDA: the graph cache, switched on").

A model whose RoPE state is lazy (Llama 3, YaRN in DeepSeek and gpt-oss) computes it in its first eval on the
stream it was built on, and MLX commits a command buffer at every fence. Those commits are not tasks, so MLX's ten
tasks in flight (``MAX_ACTIVE_TASKS``, ``transforms.cpp``) do not hold the host; ``cuGraphLaunch`` does, at 42 graphs
in flight (``model_max_pending_buffers``, traced). A model without lazy state is held by the throttle.
"""

from __future__ import annotations

from dataclasses import replace

from cuda_runs import predicted, profile_before_d, rows

from kvsim.generation.config import ModelConfig
from kvsim.generation.measure import row_workload
from kvsim.generation.model import build_model
from kvsim.generation.predict import predict
from kvsim.generation.schedule import record, replay
from kvsim.sim.profile import load_profile


def test_gpt_oss_first_eval_is_cut_at_its_fences_and_lands_on_its_fitted_play() -> None:
    """gpt-oss-20b's 2,000-token prompt is one chunk, so its first eval is the peak: 15.07 GB above the weights.
    Played without fences (one graph node per op, as then), the task throttle held it at 12.25 (-19%); with them,
    kvsim's point is the fenced fitted play, 14.66, and the range holds the run. With MLX's graph nodes
    (``model_mlx_nodes``: its grouped-query products are two nodes each) the shipped point is 6% over it, inside."""
    row = next(r for r in rows("heldout12.jsonl") if r["name"] == "gpt-oss-20b")
    built, workload = build_model(ModelConfig(row["config"], row["name"])), row_workload(row)
    profile = replace(load_profile("mlx-cuda"), model_mlx_nodes=False)
    recorded = record(built, workload, profile, None)
    assert recorded.first_eval_fenced
    fitted = replay(recorded, profile).evals[0].peak_bytes
    unfenced = replace(profile, model_stream_fences=False)
    plain = replay(record(built, workload, unfenced, None), unfenced).evals[0].peak_bytes
    real = row["peak_bytes"] - built.weights_bytes
    assert plain - built.weights_bytes < 0.85 * real < fitted - built.weights_bytes
    assert abs(fitted / row["peak_bytes"] - 1) <= 0.05
    p = predict(built, workload, "mlx-cuda")
    assert 0.0 < p.peak_bytes / row["peak_bytes"] - 1 <= 0.07
    assert p.peak_low_bytes <= row["peak_bytes"] <= p.peak_high_bytes


def test_the_launch_limit_holds_a_fenced_first_eval() -> None:
    """DeepSeek-V2-Lite 4-bit at a one-chunk 2,560-token prompt (the fifteenth set's miss, -24.4% under the halfway
    point) peaked 11.02 GB above its weights. Its fenced play with the host running ahead of every fence's commit
    reads 15.97; held at 42 graphs in flight it reads 11.07, within 2%."""
    row = next(r for r in rows("heldout15.jsonl") if "deepseek" in r["name"] and r["prompt_tokens"] == 2560)
    built, workload = build_model(ModelConfig(row["config"], row["name"])), row_workload(row)
    profile = load_profile("mlx-cuda")
    recorded = record(built, workload, profile, None)
    held = replay(recorded, profile).evals[0].peak_bytes
    free = replay(recorded, replace(profile, model_max_pending_buffers=0)).evals[0].peak_bytes
    assert abs(held / row["peak_bytes"] - 1) <= 0.02
    assert free - built.weights_bytes > 1.4 * (row["peak_bytes"] - built.weights_bytes)


def _errors_pct(pairs: list[tuple[dict, object]]) -> dict[str, float]:
    return {f"{r['name'].split('/')[-1].removesuffix('.json')}:{r['prompt_tokens']}":
            round((p.peak_bytes / r["peak_bytes"] - 1) * 100, 1) for r, p in pairs}


def test_the_seventeenth_set_lies_inside_and_its_quantized_first_evals_on_their_runs() -> None:
    """The seventeenth held-out set was predicted twice before it was measured: with a warm first eval and the
    halfway point (5 of 7 inside), and with the first eval played cold through MLX's graph cache, its point the play
    (``heldout17-graph-cache.jsonl``: 7 of 7, every run above its point, signed median -10.6%). Since first-eval
    instantiations leave the newest graph running (``model_instantiate_overlap_buffers``, chosen after these runs were
    read) each point lies at or above that one, the unfenced quantized ones within 0.5% of their runs. Each run lies
    inside its range, as does the sixteenth set's unfenced control (Qwen3-8B 4-bit at 2,048). (Played under the model of
    its time: the profile before candidate D.)"""
    stored = {(p["name"], p["prompt_tokens"]): p for p in rows("predictions/heldout17-graph-cache.jsonl")}
    control = [r for r in rows("heldout16.jsonl") if "qwen3-8b-4bit" in r["name"]]
    assert len(stored) == 7 and len(control) == 1
    pairs = predicted([*rows("heldout17.jsonl"), *control], profile_before_d())
    for row, p in pairs:
        assert p.peak_low_bytes <= row["peak_bytes"] <= p.peak_high_bytes, row["name"]
        before = stored.get((row["name"], row["prompt_tokens"]))
        assert before is None or p.peak_bytes >= before["peak_bytes"], row["name"]
    errors = _errors_pct(pairs)
    assert all(abs(errors[k]) <= 0.5 for k in ("qwen2.5-7b-4bit:2048", "mistral-7b-instruct-v0.3-4bit:2048",
                                                 "qwen3-4b-8bit:2048", "qwen3-8b-4bit:2048")), errors


def test_the_eighteenth_set_reads_six_of_eight_inside() -> None:
    """The eighteenth held-out set was predicted under the shipped profile before it was measured
    (``predictions/heldout18.jsonl``: 5 of 8 inside). Two changes made after it move its points up: the element limit
    counting whole M (``BackendProfile.needs_commit``: Phi-3-mini 8-bit's nine command buffers became MLX's eight) and
    first-eval instantiations that leave the newest graph running. Qwen3-4B 4-bit at 3,072 now reads on its run and
    comes inside. Out: Phi-3-mini 8-bit, at kvsim's cold play with the latest frees, 1.5% past the range's top, and
    Mistral-7B 6-bit's second chunk, which mlx-lm's loop runs low ("CUDA: an eighteenth held-out set"). (Played under
    the model before candidate D.)"""
    stored = {(p["name"], p["prompt_tokens"]): p for p in rows("predictions/heldout18.jsonl")}
    inside = set()
    for row, p in predicted(rows("heldout18.jsonl"), profile_before_d()):
        before = stored[(row["name"], row["prompt_tokens"])]
        assert p.peak_bytes >= before["peak_bytes"], row["name"]
        assert p.weights_bytes == row["params_bytes"] and p.kv_bytes == row["kv_bytes"], row["name"]
        if p.peak_low_bytes <= row["peak_bytes"] <= p.peak_high_bytes:
            inside.add(row["name"].split("/")[-1].removesuffix(".json"))
        if "phi-3-mini-4k-instruct-8bit" in row["name"]:
            assert p.peak_high_bytes < row["peak_bytes"] < 1.015 * p.peak_high_bytes
    assert inside == {"qwen3-4b-4bit", "llama-3.1-8b-6bit", "internlm2_5-7b-chat", "granite-3.0-2b-instruct",
                      "smollm3-3b", "starcoder2-3b"}


def test_the_nineteenth_set_reads_as_it_was_predicted() -> None:
    """The nineteenth held-out set: ten one-chunk prompts not measured before, predicted before they were measured
    under first-eval instantiations that leave the newest graph running (``predictions/heldout19.jsonl``) and under the
    rule before, which waits for every graph (``heldout19-overlap0.jsonl``). The model before candidate D predicts the
    first, value for value; all ten runs lie inside their ranges, against eight under the rule before (Gemma-3-1B 4-bit -25.1%,
    Qwen3-4B 5-bit -20.7%). Its quantized runs read within 1%, but Gemma-3-1B 4-bit (-5.3%) and Qwen3-4B 5-bit at
    3,072 (-16.0%); three dense ones read 5.8-9.5% over, where the rule before was exact: a first eval's peak meets its
    predecessor's work only where a real instantiation returns early, once in three."""
    stored = {(p["name"], p["prompt_tokens"]): p for p in rows("predictions/heldout19.jsonl")}
    before = {(p["name"], p["prompt_tokens"]): p for p in rows("predictions/heldout19-overlap0.jsonl")}
    runs = rows("heldout19.jsonl")
    assert len(runs) == len(stored) == len(before) == 10
    pairs = predicted(runs, profile_before_d())
    for row, p in pairs:
        key = (row["name"], row["prompt_tokens"])
        assert (p.peak_bytes, p.peak_low_bytes, p.peak_high_bytes) == (
            stored[key]["peak_bytes"], stored[key]["peak_low_bytes"], stored[key]["peak_high_bytes"]), row["name"]
        assert p.peak_low_bytes <= row["peak_bytes"] <= p.peak_high_bytes, row["name"]
    old = [before[(r["name"], r["prompt_tokens"])] for r in runs]
    assert sum(p["peak_low_bytes"] <= r["peak_bytes"] <= p["peak_high_bytes"] for r, p in zip(runs, old)) == 8
    errors = _errors_pct(pairs)
    assert sorted(k for k, e in errors.items() if e > 5) == ["qwen2.5-3b-instruct:2048", "qwen3-1.7b:2048",
                                                           "smollm2-1.7b:2048"], errors
