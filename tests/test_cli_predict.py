"""`kvsim predict` as the contract says: one JSON line per scenario, errors as lines, exit 2."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

VALID = {
    "id": "ok",
    "model": {"n_layers": 2, "kv_heads": 2, "head_dim": 64, "dtype": "float16"},
    "policy": {"name": "step", "step": 256},
    "workload": {"prompt_tokens": 300, "prefill_chunk": 128, "decode_tokens": 300, "batch": 1},
}


def predict(tmp_path: Path, doc: object, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "s.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return subprocess.run(
        [sys.executable, "-m", "kvsim.cli", "predict", str(path), *args], capture_output=True, text=True, timeout=120
    )


def test_valid_scenarios_predicted_in_order(tmp_path: Path) -> None:
    second = {**VALID, "id": 7, "model": {"preset": "llama-3.1-8b"}, "backend": "mlx-cuda"}
    out = predict(tmp_path, [VALID, second])
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert [x["id"] for x in lines] == ["ok", 7]
    assert lines[1]["backend"] == "mlx-cuda"
    for line in lines:
        assert line["peak_bytes"] >= line["final_active_bytes"] > 0
        assert line["peak_low_bytes"] <= line["peak_bytes"] <= line["peak_high_bytes"]


def test_backend_flag_overrides(tmp_path: Path) -> None:
    out = predict(tmp_path, [VALID], "--backend", "mlx-metal")
    assert json.loads(out.stdout)["backend"] == "mlx-metal"


BAD = [
    ({"policy": {"name": "nope"}}, "policy.name"),
    ({"model": {"preset": "gpt-9"}}, "model.preset"),
    ({"workload": {**VALID["workload"], "prompt_tokens": -5}}, "workload.prompt_tokens"),
    ({"workload": {**VALID["workload"], "prefill_chunk": 0}}, "workload.prefill_chunk"),
    ({"model": {"layers": [{"kv_heads": 1, "head_dim": 8, "ratio": 0}]}}, "model.layers[0].ratio"),
    ({"policy": {"name": "geometric", "seed_rows": 64, "factor": 1.0}}, "policy.factor"),
    ({"policy": {"name": "geometric", "seed_rows": 64, "cap": 32}}, "policy.cap"),
    ({"model": {"n_layers": "32", "kv_heads": 2, "head_dim": 64}}, "model.n_layers"),
    ({"workload": {"prompt_tokens": 10}}, "workload.prefill_chunk"),
    ({"model": {"n_layers": 2, "kv_heads": 2, "head_dim": 64, "dtype": "int8"}}, "model.dtype"),
    ({"workload": {**VALID["workload"], "decode_tokens": 10**12}}, "workload.decode_tokens"),
    ({"policy": {"name": "step", "step": 1}, "workload": {**VALID["workload"], "decode_tokens": 1_000_000}}, "policy"),
]


@pytest.mark.parametrize(("patch", "field"), BAD)
def test_invalid_scenario_is_one_error_line_and_others_still_predicted(tmp_path: Path, patch: dict, field: str) -> None:
    out = predict(tmp_path, [{**VALID, **patch, "id": "bad"}, VALID])
    assert out.returncode == 2
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and "Traceback" not in out.stderr
    error = json.loads(lines[0])
    assert error["id"] == "bad" and error["error"].startswith(field + ":")
    assert "\n" not in error["error"]
    assert json.loads(lines[1])["id"] == "ok" and "peak_bytes" in json.loads(lines[1])


@pytest.mark.parametrize("doc", ["{not json", "42", ""])
def test_unreadable_file_is_one_line(tmp_path: Path, doc: str) -> None:
    out = predict(tmp_path, doc)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_missing_file(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "kvsim.cli", "predict", str(tmp_path / "none.json")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "cannot read" in out.stderr


def test_simulate_formats(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps([VALID]))
    for args, check in (([], "peak"), (["--json"], '"timeline"'), (["--csv"], "first_step")):
        out = subprocess.run([sys.executable, "-m", "kvsim.cli", "simulate", str(path), *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and check in out.stdout


def test_binary_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "scenarios.json"
    path.write_bytes(b'[{"id": "\xff"}]')
    out = subprocess.run([sys.executable, "-m", "kvsim.cli", "predict", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"kvsim: {path}: not UTF-8 text (byte 9: invalid start byte)"


def test_simulate_limit_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps([VALID]))
    out = subprocess.run([sys.executable, "-m", "kvsim.cli", "simulate", str(path), "--limit-bytes", "-5"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines()[-1] == "kvsim simulate: error: argument --limit-bytes: must be >= 1, got -5"


def _many(n: int, decode_tokens: int) -> list[dict]:
    return [{**VALID, "id": f"s{i}", "model": {"preset": "llama-3.1-8b"},
             "workload": {**VALID["workload"], "decode_tokens": decode_tokens + 256 * i}} for i in range(n)]


def test_stdin_and_pool_keep_input_order_and_match_one_process(tmp_path: Path) -> None:
    doc = [*_many(6, 2048), {**VALID, "id": "bad", "policy": {"name": "nope"}}]
    text = json.dumps(doc)
    run = [sys.executable, "-m", "kvsim.cli", "predict", "-"]
    pooled = subprocess.run([*run, "--jobs", "2"], input=text, capture_output=True, text=True, timeout=120)
    single = subprocess.run([*run, "--jobs", "1"], input=text, capture_output=True, text=True, timeout=120)
    assert pooled.returncode == single.returncode == 2
    assert [json.loads(x)["id"] for x in pooled.stdout.splitlines()] == [d["id"] for d in doc]
    assert pooled.stdout == single.stdout and pooled.stderr == ""


def _default_sigint() -> None:
    """In the child before exec: SIGINT's default action. A test run started in the background by a
    non-interactive shell inherits SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_exits_130_with_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_many(40, 20_000)))
    proc = subprocess.Popen([sys.executable, "-m", "kvsim.cli", "predict", str(path), "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    first = proc.stdout.readline()  # the pool is running and has printed
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err
    lines = (first + rest).splitlines()
    assert 1 <= len(lines) < 40 and (first + rest).endswith("\n")
    assert [json.loads(x)["id"] for x in lines] == [f"s{i}" for i in range(len(lines))]


def test_exact_flag_gives_the_same_bytes_as_fast_mode(tmp_path: Path) -> None:
    doc = [{**VALID, "id": "long", "policy": {"name": "step", "step": 64},
            "workload": {**VALID["workload"], "decode_tokens": 12_000}}]
    fast, exact = (json.loads(predict(tmp_path, doc, *flag).stdout) for flag in ((), ("--exact",)))
    fields = ("peak_bytes", "final_active_bytes", "peak_low_bytes", "peak_high_bytes", "grow_events", "bytes_copied")
    assert {f: fast[f] for f in fields} == {f: exact[f] for f in fields}
