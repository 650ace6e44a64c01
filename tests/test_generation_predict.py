"""``kvsim generate``: the prediction against real mlx-lm generations (random weights, CPU), the CLI's
contract fields, its one-line errors, the fit verdict, and that tracing leaves MLX as it found it."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest

from kvsim.cli import main
from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.measure import measure, scale_config
from kvsim.generation.model import build_model
from kvsim.generation.predict import predict
from kvsim.generation.schedule import Workload

SMALL = {"hidden_size": 256, "intermediate_size": 768, "vocab_size": 8192}


def small(name: str) -> dict:
    return scale_config(load_model_config(name).config, 2, **SMALL)


@pytest.mark.parametrize(("name", "prompt", "step", "tokens", "max_kv"), [
    ("qwen3-0.6b", 1000, 512, 40, None),
    ("qwen2.5-0.5b-instruct", 700, 256, 300, None),
    ("llama-3.2-1b-instruct", 1500, 512, 100, 512),  # --max-kv-size: mlx-lm's RotatingKVCache(keep=4)
])
def test_peak_weights_and_kv_against_a_real_generation(name: str, prompt: int, step: int, tokens: int, max_kv):
    cfg = small(name)
    run = measure(name, cfg, prompt, tokens, step, max_kv_size=max_kv)
    pred = predict(build_model(ModelConfig(cfg, name)), Workload(prompt, tokens, step, max_kv), "mlx-cpu")
    assert pred.weights_bytes == run.params_bytes
    assert pred.kv_bytes == run.kv_bytes
    # a CPU run's transient moves with host load (its worker thread frees late): 10% here, not the 2% target
    assert abs(pred.peak_bytes / run.peak_bytes - 1) < 0.10, (pred.peak_bytes, run.peak_bytes)
    assert pred.peak_bytes > pred.weights_bytes + pred.peak_kv_bytes


def test_a_run_reads_each_phases_peak():
    """The peak is read and reset as generate_step reports each phase done; the run's peak is the largest."""
    run = measure("qwen3-0.6b", small("qwen3-0.6b"), 1000, 5, 512)
    phases = [(phase, tokens) for phase, tokens, _ in run.phase_peaks]
    assert phases == [("start", 0), ("prefill", 512), ("prefill", 999), ("first", 1000),
                      *(("decode", n) for n in range(1, 6)), ("end", 0)]
    assert run.peak_bytes == max(p for _, _, p in run.phase_peaks)
    assert all(p > run.weights_bytes for phase, _, p in run.phase_peaks if phase == "prefill")


def test_cli_json_has_the_contract_fields(capsys):
    assert main(["generate", "--model", "qwen3-0.6b", "--prompt-tokens", "3000", "--max-tokens", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    built = build_model(load_model_config("qwen3-0.6b"))
    assert out["weights_bytes"] == built.weights_bytes
    # 28 layers x K and V x 8 heads x 128 dims x 2 bytes x 3072 rows (3020 rounded up to KVCache's 256 step)
    assert out["kv_bytes"] == 28 * 2 * 8 * 128 * 2 * 3072
    assert out["peak_bytes"] > out["weights_bytes"] + out["kv_bytes"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "{cfg}"], "model_type: mlx-lm 0.32.2 does not support 'no_such_arch'"),
    (["--model", "no/such-repo-xyz"], "model: "),
    (["--model", "qwen3-0.6b", "--device", "mac-7gb"], "device: unknown device 'mac-7gb'"),
    (["--model", "qwen3-0.6b", "--policy", "nope"], "policy.name"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "no_such_arch"}))
    argv = [a.replace("{cfg}", str(cfg)) for a in argv]
    assert main(["generate", "--prompt-tokens", "100", "--max-tokens", "4", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kvsim: ") and message in err[0]


def test_missing_config_field_names_it(tmp_path, capsys):
    cfg = dict(load_model_config("llama-3.2-1b-instruct").config)
    del cfg["num_attention_heads"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["generate", "--model", str(tmp_path), "--prompt-tokens", "10", "--max-tokens", "2"]) == 2
    assert capsys.readouterr().err.strip() == "kvsim: num_attention_heads: missing from the config"


def test_unfused_gpu_attention_is_noted(tmp_path, capsys):
    """phi-2's float32 queries keep CUDA's fused attention out (``Prediction.notes``): the CLI says so in
    its text and its JSON; a bfloat16 model on CUDA, and phi-2 on the CPU (measured exact), get no note."""
    cfg = dict(load_model_config("phi-2").config, num_hidden_layers=1)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    argv = ["generate", "--model", str(tmp_path), "--prompt-tokens", "2048", "--max-tokens", "2", "--no-search"]
    assert main([*argv, "--backend", "mlx-cuda", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 1 and "unfused" in notes[0] and "0.50 GiB" in notes[0]
    assert main([*argv, "--backend", "mlx-cuda"]) == 0
    text = capsys.readouterr().out
    assert "note       Attention runs unfused on mlx-cuda" in text and "\n  range    " in text
    assert main([*argv, "--backend", "mlx-cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []
    qwen = dict(load_model_config("qwen3-0.6b").config, num_hidden_layers=1)
    assert predict(build_model(ModelConfig(qwen, "qwen3-0.6b")), Workload(2048, 2), "mlx-cuda").notes == []


def test_cannot_fit_is_a_verdict_with_fixes(capsys):
    argv = ["generate", "--model", "llama-3.2-1b-instruct", "--prompt-tokens", "2048", "--max-tokens", "8",
            "--device", "mac-8gb", "--no-search", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["fits"] is True and "fixes" not in out
    big = ["generate", "--model", "llama-3.1-8b-instruct", "--prompt-tokens", "2048", "--max-tokens", "8",
           "--device", "mac-8gb", "--no-search", "--json", "--search-budget-s", "600"]  # every fix predicted
    assert main(big) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["status"] == "over MLX's memory limit" and out["verdict"]["headroom_bytes"] < 0
    fits = {f["flags"] for f in out["fixes"] if f["fits"]}
    assert fits == {"4-bit weights (mlx_lm.convert -q --q-bits 4)"}  # 16 GB of bf16 weights: only 4-bit ones fit
    assert out["fixes"][0]["flags"] in fits


def test_tracing_leaves_mlx_and_compiled_mlx_lm_untouched():
    cfg = small("qwen3-0.6b")
    mx.random.seed(1)
    model = build_model(ModelConfig(cfg, "q"), stand_in=False).model
    mx.eval(model.parameters())
    tokens = mx.arange(64)[None]
    before = model(tokens)
    mx.eval(before)
    add = mx.array.__add__
    predict(build_model(ModelConfig(cfg, "q")), Workload(300, 4, 128), "mlx-cpu")
    assert mx.array.__add__ is add
    after = model(tokens)
    assert mx.array_equal(before, after).item()


def test_a_fitting_point_whose_range_tops_the_working_set_says_so(capsys):
    """Llama-3.1-8B at 12K tokens on an RTX 4090: the point (20.9 GB) fits its 24.5 GB, the range's top (25.1) does
    not, and the verdict says a run may peak over it."""
    argv = ["generate", "--model", "llama-3.1-8b-instruct", "--prompt-tokens", "12288", "--max-tokens", "8",
            "--device", "rtx-4090", "--no-search"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["fits"] and out["peak_bytes"] < out["verdict"]["working_set_bytes"] < out["peak_high_bytes"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"-> FITS\n  but a run may peak up to {out['peak_high_bytes'] / 1e9:.2f} GB" in text
