"""The longest-context search and the settings of ``kvsim generate --device`` (``kvsim.generation.verdict``):
the probe placement on synthetic peaks, each probe's decision against ``predict`` on small real mlx-lm
models, the answer exact to the search's granularity, the time budget, and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cli import main
from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.devices import Device
from kvsim.generation.measure import scale_config
from kvsim.generation.model import build_model
from kvsim.generation.predict import predict
from kvsim.generation.schedule import Workload, play_generation
from kvsim.generation.verdict import (
    CONTEXT_STEP_TOKENS,
    SEARCH_BUDGET_S,
    SEARCH_LIMIT_TOKENS,
    Budget,
    context_per_policy,
    longest,
    next_probe,
    probe,
)
from kvsim.sim.profile import load_profile

STEP = CONTEXT_STEP_TOKENS
LOWPEAK = {"name": "lowpeak"}


def search(peak, start: int, limit: int, per_token: float = 0.0) -> tuple[int, dict[int, int]]:
    """``next_probe`` driven to the end on ``peak(tokens)``."""
    known: dict[int, int] = {}
    while (n := next_probe(start, known, limit, per_token)) is not None:
        assert n not in known, (n, sorted(known))
        known[n] = peak(n)
    return longest(known, limit), known


def brute_force(peak, limit: int) -> int:
    """The longest multiple of the step up to the search's limit within ``limit``; else an eighth of a step."""
    fit = [n for n in range(STEP, SEARCH_LIMIT_TOKENS + 1, STEP) if peak(n) <= limit]
    return fit[-1] if fit else (STEP // 8 if peak(STEP // 8) <= limit else 0)


# ---- the probes' placement ----------------------------------------------------------------------------
def test_a_linear_peak_is_found_in_a_few_probes() -> None:
    limit = 48 << 30
    for start, per_token in ((131072, 0.0), (4096, 0.0), (32768, 5e5), (4096, 5e5)):
        best, known = search(lambda n: int(10e9 + 5e5 * n), start, limit, per_token)
        assert best == brute_force(lambda n: int(10e9 + 5e5 * n), limit) and len(known) <= 5, sorted(known)


def test_the_ends_of_the_range_all_fit_none_fit_and_an_eighth_of_a_step() -> None:
    best, known = search(lambda n: 1, 4096, 10)
    assert best == SEARCH_LIMIT_TOKENS and len(known) <= 3
    best, known = search(lambda n: 100, 4096, 10)  # the weights alone are over: down to 128 tokens
    assert best == 0 and min(known) == STEP // 8 and len(known) <= 5, sorted(known)
    best, _ = search(lambda n: n, 4096, 500)
    assert best == STEP // 8


@settings(max_examples=200, deadline=None)
@given(weights=st.integers(0, 50), slopes=st.lists(st.integers(0, 40), min_size=1, max_size=6),
       jump=st.integers(0, 300), start=st.integers(1, 300_000), limit=st.integers(0, 40_000),
       per_token=st.sampled_from([0.0, 0.001, 0.05]))
def test_any_monotone_peak_gets_the_exact_answer_in_a_bounded_number_of_probes(
        weights, slopes, jump, start, limit, per_token) -> None:
    """Piecewise-affine peaks (the slope changes where a cache stops growing or a chunk's scores do) with a
    jump (a growth copy): the search lands where a brute force over every step does, in at most
    4 + 2 x 10 probes (and two more for the eighth of a step)."""
    span = SEARCH_LIMIT_TOKENS // len(slopes)

    def peak(n: int) -> int:
        out, left = weights + (jump if n > SEARCH_LIMIT_TOKENS // 3 else 0), n
        for s in slopes:
            out += s * min(left, span) // 1024
            left = max(0, left - span)
        return out

    best, known = search(peak, start, limit, per_token)
    assert best == brute_force(peak, limit)
    assert len(known) <= 26, sorted(known)


# ---- probes on real mlx-lm models -------------------------------------------------------------------------
def small(name: str, layers: int = 2) -> object:
    cfg = scale_config(load_model_config(name).config, layers, hidden_size=256, intermediate_size=768, vocab_size=8192)
    return build_model(ModelConfig(cfg, name))


def test_a_probe_of_a_one_chunk_prompt_is_predicts_peak() -> None:
    """Where the process's first eval peaks (one prefill chunk), a CUDA probe gives ``predict``'s point, the
    first eval's (``first_eval_point_share``), not ``point_estimate`` of the three timings."""
    built, w = small("qwen3-0.6b"), Workload(400, 4, 512)
    pred = predict(built, w, "mlx-cuda")
    assert pred.peak_phase == "prefill" and pred.evals[0].peak_bytes == max(e.peak_bytes for e in pred.evals)
    exact = probe(built, w, "mlx-cuda", None)
    assert exact.exact and exact.peak_bytes == pred.peak_bytes and exact.plays == 4
    assert probe(built, w, "mlx-cuda", None, pred.peak_bytes).exact  # at the limit: fits


@pytest.mark.parametrize("backend", ["mlx-metal", "mlx-cuda", "mlx-cpu"])
@pytest.mark.parametrize("policy", [None, LOWPEAK])
def test_a_probe_is_predicts_peak_or_a_bound_over_the_limit(backend: str, policy) -> None:
    built, w = small("qwen3-0.6b"), Workload(3000, 40, 512)
    pred = predict(built, w, backend, policy)
    exact = probe(built, w, backend, policy)
    assert exact.exact and exact.peak_bytes == pred.peak_bytes
    assert exact.plays == (3 if load_profile(backend).is_gpu else 1)  # the floor timing sets only the range
    assert probe(built, w, backend, policy, pred.peak_bytes).peak_bytes == pred.peak_bytes  # at the limit: fits
    over = probe(built, w, backend, policy, pred.peak_bytes - 1)
    assert over.peak_bytes > pred.peak_bytes - 1 and over.peak_bytes <= pred.peak_bytes
    weights_over = probe(built, w, backend, policy, built.weights_bytes - 1)
    assert weights_over == replace(weights_over, exact=False, plays=0)  # no play: the weights alone are over


@pytest.mark.parametrize("backend", ["mlx-metal", "mlx-cuda"])
def test_the_held_state_bound_does_not_depend_on_the_free_timing(backend: str) -> None:
    """``probe``'s premise: every timing's evals start from the same held state (so the first timing's bounds
    the others'), and each eval's peak is at least the weights plus that state."""
    built, profile = small("qwen3-0.6b"), load_profile(backend)
    w = Workload(2500, 300, 1024)
    runs = [play_generation(built, w, t)[0] for t in (profile, profile.variant("low"), profile.variant("high"))]
    held = [[e.kv_before_bytes for e in evals] for evals in runs]
    assert held[0] == held[1] == held[2] and max(held[0]) > 0
    assert all(e.peak_bytes >= built.weights_bytes + e.kv_before_bytes for evals in runs for e in evals)


def test_the_longest_context_is_exact_to_the_step() -> None:
    """On a small real model and a device whose working set falls between two steps' peaks, the search's
    answer fits and the next step does not (``predict``), for mlx-lm's caches and ``lowpeak`` (whose peak
    is not monotone here: 50K tokens peak higher than 51K; the answer is still a fitting step whose next
    is over)."""
    built, backend = small("qwen3-0.6b"), "mlx-cuda"
    w = Workload(4096, 64)
    limit = (predict(built, replace(w, prompt_tokens=20 * STEP), backend).peak_bytes
             + predict(built, replace(w, prompt_tokens=21 * STEP), backend).peak_bytes) // 2
    dev = Device("test", 2 * limit, limit, limit, backend)
    found = context_per_policy(built, w, dev, backend, {"mlx-lm": None, "lowpeak": LOWPEAK})
    for name, policy in (("mlx-lm", None), ("lowpeak", LOWPEAK)):
        f = found[name]
        assert f.done and f.over_tokens == f.fits_tokens + STEP and f.probes <= 12, f
        assert predict(built, replace(w, prompt_tokens=f.fits_tokens), backend, policy).peak_bytes <= limit
        assert predict(built, replace(w, prompt_tokens=f.over_tokens), backend, policy).peak_bytes > limit


def test_an_empty_budget_reports_the_bounds_it_has_and_still_decides_by_the_weights() -> None:
    built, backend = small("qwen3-0.6b"), "mlx-cpu"
    w = Workload(4096, 16)
    dev = Device("test", 1 << 40, 1 << 39, 1 << 39, backend)
    found = context_per_policy(built, w, dev, backend, {"mlx-lm": None}, Budget(0.0), {"mlx-lm": {4096: 1}})
    assert found["mlx-lm"] == replace(found["mlx-lm"], fits_tokens=4096, over_tokens=None, done=False, probes=1)
    small_device = Device("test", 1 << 40, built.weights_bytes - 1, 1 << 39, backend)  # the weights alone are over
    found = context_per_policy(built, w, small_device, backend, {"mlx-lm": None}, Budget(0.0))
    assert found["mlx-lm"] == replace(found["mlx-lm"], fits_tokens=0, done=True)  # no play needed: done anyway


# ---- the command line ---------------------------------------------------------------------------------------
def test_cli_reports_a_search_cut_by_its_budget(tmp_path: Path, capsys) -> None:
    cfg = scale_config(load_model_config("qwen3-0.6b").config, 2, hidden_size=256, intermediate_size=768,
                       vocab_size=8192)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    argv = ["generate", "--model", str(tmp_path), "--prompt-tokens", "4096", "--max-tokens", "16",
            "--device", "mac-8gb", "--backend", "mlx-cpu"]
    assert main([*argv, "--search-budget-s", "0"]) == 0
    text = capsys.readouterr().out
    assert "longest prompt that fits with mlx-lm: at least 4096 tokens (the 0 s search budget ran out" in text
    assert "longest prompt that fits with lowpeak: not probed (the 0 s search budget ran out" in text
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["longest_prompt_search"]["mlx-lm"]["done"] and out["longest_prompt_search"]["lowpeak"]["done"]
    assert out["longest_prompt_tokens"]["mlx-lm"] >= 4096 and out["search_s"] < 60


def test_the_budget_defaults_to_a_minute_and_a_negative_one_is_one_line(capsys) -> None:
    from kvsim.cli.commands import build_parser

    args = build_parser().parse_args(["generate", "--model", "m", "--prompt-tokens", "8", "--max-tokens", "2"])
    assert args.search_budget_s == SEARCH_BUDGET_S == 60
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--model", "qwen3-0.6b", "--prompt-tokens", "8", "--max-tokens", "2",
              "--search-budget-s", "-1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--search-budget-s: must be a finite number >= 0, got '-1'" in err[-1]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process's CPU time from /proc")
def test_ctrl_c_during_generate_exits_130_with_one_line() -> None:
    """SIGINT to a real ``kvsim generate --device`` past its imports (3 s of CPU time: building the model or predicting)."""
    argv = [sys.executable, "-m", "kvsim.cli", "generate", "--model", "qwen3-8b", "--prompt-tokens", "4096",
            "--max-tokens", "4096", "--device", "h100", "--search-budget-s", "600"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # not SIG_IGN inherited from a background shell
    t = time.monotonic()
    while _cpu_s(proc.pid) < 3 and proc.poll() is None and time.monotonic() - t < 120:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert err == "kvsim: interrupted\n" and out == ""


def test_the_dashboards_probe_is_the_same_search() -> None:
    """The "Will it fit?" page's probe job: the predicted peak within the device's working set, a figure
    over it otherwise (fewer plays), and its placement is ``next_probe``'s."""
    from kvsim.dashboard import fit_compute as fc

    assert fc.next_probe is next_probe and fc.longest is longest and fc.STEP_TOKENS == STEP
    cfg = scale_config(load_model_config("qwen3-0.6b").config, 2, hidden_size=256, intermediate_size=768,
                       vocab_size=8192)
    built, w = build_model(ModelConfig(cfg, "upload:c.json")), Workload(3000, 16)
    peak = predict(built, w, "mlx-metal").peak_bytes
    for limit in (peak, peak - 1):
        req = fc.FitRequest("c.json", json.dumps(cfg), w, fc.MLX_LM, "mlx-metal",
                            Device("test", 1 << 40, limit, 1 << 40, "mlx-metal"))
        assert (fc.peak(req) <= limit) == (peak <= limit) and (fc.peak(req) == peak or limit < peak)
