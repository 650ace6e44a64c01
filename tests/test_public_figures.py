"""data/public/mlx-lm-peak-reports.json: schema, and one filled prediction rerun (issue #17)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doc_tools import load_tool

ROOT_DIR = Path(__file__).resolve().parents[1]
REPORTS_PATH = ROOT_DIR / "data" / "public" / "mlx-lm-peak-reports.json"
SCRIPT_PATH = ROOT_DIR / "docs" / "tools" / "predict_public.py"

# field -> allowed types (None allowed where the report does not state it)
REQUIRED_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,), "model": (str,), "model_inferred": (bool,),
    "prompt_tokens": (int,), "generated_tokens": (int, type(None)),
    "prefill_step_size": (int,), "prefill_step_size_inferred": (bool,),
    "peak_gb": (int, float), "peak_unit": (str,), "quoted": (str,), "url": (str,),
    "config_file": (str, type(None)), "kvsim_peak_gb": (int, float, type(None)),
}
# The cheap row rerun below: Qwen3-4B 4-bit, 2,048 + 128 tokens (about 3 s).
CHEAP_ROW_ID = "r07"


def load_script():
    """The prediction script as a module (it lives beside the data, not in the package)."""
    return load_tool(SCRIPT_PATH)


@pytest.fixture(scope="module")
def reports() -> list[dict]:
    return json.loads(REPORTS_PATH.read_text())


def test_schema(reports: list[dict]) -> None:
    ids = [r["id"] for r in reports]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for report in reports:
        for field, types in REQUIRED_FIELDS.items():
            assert isinstance(report.get(field), types), (report["id"], field, report.get(field))
        if report["config_file"] is not None:
            assert (ROOT_DIR / report["config_file"]).is_file(), report["config_file"]


def test_filled_predictions_are_consistent(reports: list[dict]) -> None:
    script = load_script()
    filled = [r for r in reports if r["kvsim_peak_gb"] is not None]
    assert len(filled) >= 8
    for report in filled:
        run = report["kvsim_run"]
        # the stored arguments are the ones the script derives from the report today
        assert run["args"] == script.run_args(report), report["id"]
        assert report["kvsim_peak_gb"] == round(run["peak_bytes"] / script.unit_divisor(report), 3)
        error_pct = 100.0 * (report["kvsim_peak_gb"] / report["peak_gb"] - 1.0)
        assert report["kvsim_error_pct"] == pytest.approx(error_pct, abs=0.051), report["id"]
        assert 0 < run["weights_bytes"] < run["peak_bytes"], report["id"]


def test_one_prediction_reproduces(reports: list[dict]) -> None:
    script = load_script()
    report = next(r for r in reports if r["id"] == CHEAP_ROW_ID)
    result = script.predict(script.run_args(report))
    assert result["peak_bytes"] == report["kvsim_run"]["peak_bytes"]
    assert result["weights_bytes"] == report["kvsim_run"]["weights_bytes"]
