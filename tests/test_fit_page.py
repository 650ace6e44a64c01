"""The "Will it fit?" tab end to end with streamlit's AppTest, the real mlx-lm model classes and kvsim's
generation engine (a small shipped config, short prompts, so the whole page finishes in seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvsim.dashboard import fit_compute as fc
from kvsim.dashboard.fit_links import check_links
from kvsim.generation.config import shipped_names
from kvsim.generation.devices import DEVICES
from kvsim.generation.schedule import Workload

APP = str(Path(__file__).resolve().parent.parent / "app.py")
SMALL = {"fit_model": "qwen3-0.6b", "fit_prompt": "2048", "fit_max": "16", "fit_backend": "mlx-metal"}
"""On the detected machine (the default device), with the Metal profile: the bad-link test's request is the same,
so its predictions are the ones kept from the first test."""


def run(**params: str) -> AppTest:
    """The app opened on a link with ``params``; it raised nothing."""
    at = AppTest.from_file(APP, default_timeout=120)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def verdicts(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("#### ")]


def test_opens_on_a_verdict_chart_and_search_for_a_shipped_config() -> None:
    at = run(**SMALL)
    assert at.tabs[0].label == "Will it fit?"
    [sentence] = verdicts(at)
    assert "Qwen3-0.6B at 2K tokens (+16 generated) fits this machine (" in sentence, sentence
    assert sentence.endswith(" to spare."), sentence
    assert [w.value for w in at.warning if "mlx-metal is an unverified profile" in w.value]
    assert [c.value for c in at.caption if "Runs peak from " in c.value], "a GPU's range, as kvsim generate prints it"
    [chart] = at.get("vega_lite_chart")
    assert "GPU working set" in str(chart.proto.datasets) or "GPU working set" in chart.proto.spec
    longest = at.dataframe[0].value
    assert list(longest["policy"]) == list(fc.SEARCH_POLICIES)  # the request's (mlx-lm) first
    assert all(v.endswith("K tokens") for v in longest["longest prompt"]), list(longest["longest prompt"])


def test_a_bad_link_value_is_an_inline_error_naming_it() -> None:
    at = run(**{**SMALL, "fit_kv_bits": "7", "fit_device": "mac-9gb"})
    errors = [e.value for e in at.error]
    assert any("fit_kv_bits='7'" in e for e in errors), errors
    assert any("fit_device='mac-9gb'" in e for e in errors), errors
    assert len(verdicts(at)) == 1, "the rest of the link still answers"
    assert "this machine" in verdicts(at)[0]


def test_check_links_names_each_bad_parameter_and_passes_good_ones() -> None:
    devices, shipped = [fc.device_label(d) for d in fc.device_choices().values()], shipped_names()
    good = {"fit_prompt": "131072", "fit_policy": "lowpeak", "fit_device": "H100 (80 GiB)", "fit_repo": "Qwen/Qwen3-8B"}
    assert check_links(good, devices, shipped) == {}
    bad = check_links({"fit_prompt": "12k", "fit_max": "0", "fit_policy": "nope", "fit_repo": "x y", "view": "?"},
                      devices, shipped)
    assert sorted(bad) == ["fit_max", "fit_policy", "fit_prompt", "fit_repo"]
    assert "fit_prompt='12k': not a whole number" in bad["fit_prompt"]


def test_an_offline_repo_id_or_a_bad_upload_is_one_line() -> None:
    at = run(fit_source="repo id", fit_repo="no-such-owner-kvsim/no-such-model")
    lines = [i.value for i in at.info]
    assert len(lines) == 1 and lines[0].startswith("model:") and "\n" not in lines[0], lines
    req = fc.FitRequest("c.json", '{"hidden_size": 8}', Workload(2, 1), fc.MLX_LM, "mlx-cpu", DEVICES["h100"])
    with pytest.raises(fc.ModelConfigError, match="model_type: missing from c.json"):
        fc.model_config(req)


def test_the_measured_range_counts_measured_runs_only() -> None:
    """The notice's "measured range" counts real generations (rows with their wall time), not the
    predictions stored beside them (``data/generation/mlx-cuda-0.32.4/predictions``)."""
    import json

    runs = [json.loads(line) for path in fc.GENERATION_DATA.glob("mlx-cuda-*/*.jsonl")
            for line in path.read_text(encoding="utf-8").splitlines()]
    assert runs and all("seconds" in r for r in runs)
    assert fc.measured_range("mlx-cuda").runs == len(runs)


def test_sizes_and_tokens_read_rounded() -> None:
    assert fc.size(2_254_857_830) == "2.1 GiB" and fc.size(60 << 20) == "60 MiB" and fc.size(150 << 30) == "150 GiB"
    assert fc.tokens(32768) == "32K" and fc.tokens(131072) == "128K" and fc.tokens(3000) == "3,000"
    assert fc.device_phrase(DEVICES["mac-8gb"]) == "an 8 GB Mac" and fc.device_label(DEVICES["mac-16gb"]) == "16 GB Mac" and fc.device_label(DEVICES["h100"]) == "H100 (80 GiB)"


def test_the_search_finds_the_longest_prompt_of_a_linear_peak_in_few_probes() -> None:
    limit = 48 << 30
    for start, per_token in ((131072, 0.0), (4096, 0.0), (32768, 5e5)):
        known: dict[int, int] = {}
        while (n := fc.next_probe(start, known, limit, per_token)) is not None:
            known[n] = int(10e9 + 5e5 * n)
        best = max(n for n in range(0, 1 << 20, fc.STEP_TOKENS) if 10e9 + 5e5 * n <= limit)
        assert fc.longest(known, limit) == best and len(known) <= 5, sorted(known)


def test_a_range_top_over_the_working_set_is_a_notice() -> None:
    """pythia-160m at 2K on CUDA (point 0.85 GB, range 0.74-0.99): a GPU whose working set lies between the point and
    the range's top fits the point, and the notice says a run may peak over it."""
    from kvsim.generation.devices import mlx_device

    gpu = mlx_device("tiny-gpu", int(0.92e9 / 0.95), "mlx-cuda")
    req = fc.FitRequest("pythia-160m", None, Workload(2048, 16, prefill_step_size=2048), fc.MLX_LM, "mlx-cuda", gpu)
    a = fc.answer(req)
    assert a.fits and a.low_bytes < a.peak_bytes < gpu.working_set_bytes < a.high_bytes
    [line] = [n for n in fc.notices(req, a) if "may peak up to" in n]
    assert fc.size(a.high_bytes) in line and fc.size(gpu.working_set_bytes) in line
    roomy = fc.FitRequest("pythia-160m", None, req.workload, fc.MLX_LM, "mlx-cuda", DEVICES["h100"])
    assert not [n for n in fc.notices(roomy, fc.answer(roomy)) if "may peak up to" in n]
