"""The Recommend tab at realistic sizes: 128K tokens on llama-3.1-8b, growth steps counted once per step,
each policy's failed constraint named; and a timeline whose device limit is far above its curves."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from kvsim.dashboard import charts, sweeps
from kvsim.dashboard.views import simulate_one
from kvsim.scenario.parse import parse_scenario

APP = str(Path(__file__).resolve().parent.parent / "app.py")
GIB = 1 << 30
LONG = {"view": "Recommend", "source": "preset", "preset": "llama-3.1-8b", "prompt": "131072", "chunk": "2048", "decode": "256"}
"""128K-token prompt in 2K chunks: 64 prefill steps, each growing all 32 layers (2,048 per-layer growth events)."""


def run(policies: list[str], **params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    for key, value in {**LONG, **params}.items():
        at.query_params[key] = value
    at.query_params["policies"] = policies
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_128k_tokens_recommends_a_policy_under_a_device_limit() -> None:
    at = run(["step", "geometric"], device="Apple M2 Ultra 128 GB")
    [success] = [s.value for s in at.success]
    assert success.startswith("Recommended: **step("), success
    table = at.main.dataframe[0].value
    best = table[table["meets constraints"]].iloc[0]
    assert best["growth steps"] <= 64 < best["growth events"]  # the cap counts steps, not each layer's growth
    geometric = table[table["label"].str.startswith("geometric(factor=2")]
    assert geometric["misses"].str.contains(r"over-allocation 99\.\d% over the 25% allowed").all()


def test_128k_tokens_under_a_tight_limit_lists_each_policys_failed_constraint() -> None:
    at = run(["step", "geometric"], device="custom", limit_gib="12", max_grows="8")
    assert not at.success
    [warning] = [w.value for w in at.warning if w.value.startswith("No candidate meets the constraints")]
    lines = [line for line in warning.splitlines() if line.startswith("- ")]
    assert [line.split(":")[0] for line in lines] == ["- step", "- geometric"]
    assert "GiB over the 12.0 GiB limit" in lines[0] and "growth steps, more than the 8 allowed" in lines[0]
    assert "over-allocation" in lines[1] and "% allowed" in lines[1]


def test_growth_steps_count_each_step_once_however_many_layers_grow() -> None:
    layers = [{"kv_heads": 8, "head_dim": 128, "dtype": "float16", "ratio": 1}] * 10
    scenario = parse_scenario({"id": "g", "backend": "mlx-cpu", "model": {"layers": layers}, "consumer": "last_row",
                               "workload": {"prompt_tokens": 1024, "prefill_chunk": 256, "decode_tokens": 300, "batch": 1},
                               "policy": {"name": "step", "step": 256}})
    record = sweeps.summary_record("s", simulate_one(scenario, None))
    assert record["growth_steps"] == 3 + 2  # prefill chunks 2-4 (the first allocates fresh), tokens 1025 and 1281
    assert record["grow_events"] == 10 * record["growth_steps"]


def test_failures_and_why_none_name_figure_and_bound() -> None:
    def rec(label: str, peak_gib: float, steps: int, over_pct: float, over_limit: bool = False) -> dict:
        written = 10 * GIB
        return {"label": label, "policy": label.split("(")[0], "peak_bytes": int(peak_gib * GIB), "growth_steps": steps,
                "final_kv_bytes": written + int(written * over_pct / 100), "over_allocation_bytes": int(written * over_pct / 100),
                "first_step_over_limit": 7 if over_limit else None}

    c = sweeps.Constraints(max_growth_steps=64, max_over_allocation_pct=25.0, limit_bytes=2 * GIB)
    records = [rec("step(step=64)", 3.1, 70, 0, True), rec("step(step=256)", 3.1, 64, 0, True),
               rec("geometric(factor=2)", 1.5, 7, 40.0), rec("lowpeak(step=256)", 1.9, 64, 0), {"label": "full()", "policy": "full", "error": "cut: needs more than 60 s"}]
    assert sweeps.recommend(records, c)["label"] == "lowpeak(step=256)"
    assert sweeps.failures(records[0], c) == ["peak 3.1 GiB over the 2.0 GiB limit", "70 growth steps, more than the 64 allowed"]
    assert sweeps.why_none(records[:3] + records[4:], c) == [
        "step: peak 3.1 GiB over the 2.0 GiB limit (closest: step(step=256))",
        "geometric: over-allocation 40.0% over the 25% allowed (closest: geometric(factor=2))",
        "full: cut: needs more than 60 s",
    ]
    assert sweeps.recommend(records, sweeps.Constraints())["label"] == "geometric(factor=2)"


def _curves(top_mib: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    frame = pd.DataFrame({"policy": "p", "metric": "step peak", "step": [0, 1, 2], "tokens": [256, 512, 768],
                          "MiB": [top_mib / 3, 2 * top_mib / 3, top_mib]})
    return frame, pd.DataFrame(columns=["policy", "step", "tokens", "MiB"])


def _y_values(spec: dict) -> list[float]:
    """Every value that a layer puts on the y scale (its dataset's ``MiB``)."""
    out = []
    for layer in spec["layer"]:
        if layer.get("encoding", {}).get("y", {}).get("field") == "MiB":
            out += [row["MiB"] for row in spec["datasets"][layer["data"]["name"]]]
    return out


def test_a_limit_far_above_the_curves_is_a_note_and_the_y_domain_follows_the_data() -> None:
    far = charts.timeline_chart(*_curves(60.0), limit_mib=96 * 1024).to_dict()
    assert max(_y_values(far)) == 60.0  # the y scale spans the curves only
    assert "rule" not in [layer["mark"]["type"] for layer in far["layer"]]
    [note] = [row["label"] for layer in far["layer"] if layer["mark"]["type"] == "text" for row in far["datasets"][layer["data"]["name"]]]
    assert note == "memory limit − weights: 96.0 GiB: off the scale, 1,638x the highest point"
    near = charts.timeline_chart(*_curves(60.0), limit_mib=100.0).to_dict()
    assert [layer["mark"]["type"] for layer in near["layer"]] == ["line", "rule", "text"]
    assert max(_y_values(near)) == 100.0
