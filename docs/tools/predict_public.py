"""Fill `kvsim_peak_gb` in mlx-lm-peak-reports.json with `kvsim generate` (issue #17).

For each report whose model config is known, the run is one `kvsim generate --backend mlx-metal --json`
with the report's prompt and generation lengths and the prefill step its mlx-lm version used. The
config run is the report's `config_file` with the report's quantization added (written to
`kvsim/data/configs/public/<stem>-<bits>bit[-g<group>].json`, every other field verbatim). Usage:

    .venv/bin/python docs/tools/predict_public.py [r01 r07 ...]   # default: every predictable row

Each row is written back as soon as it is predicted (temp file + os.replace), so a long run can be
stopped and resumed. The JSON keeps `kvsim_peak_gb` in the report's own unit (`peak_unit`: GB = 1e9,
GiB = 2**30), plus `kvsim_error_pct` and `kvsim_run` (the exact arguments, config and kvsim figures).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[2]
REPORTS_PATH = ROOT_DIR / "data" / "public" / "mlx-lm-peak-reports.json"
KVSIM_BIN = ROOT_DIR / ".venv" / "bin" / "kvsim"
# derived (quantized) configs are written here, whatever folder their base config is in
PUBLIC_CONFIGS_DIR = ROOT_DIR / "kvsim" / "data" / "configs" / "public"

# mlx_lm.generate's `-m` default (DEFAULT_MAX_TOKENS = 100, mlx_lm/generate.py since 2024) for the
# generate-tool reports that state no generation length; their peak is in the prefill anyway.
DEFAULT_MAX_TOKENS = 100

# Rows whose model is not in `config_file` or which need flags beyond the report's fields. Each entry
# says why. Keys: config (a base config, repo-relative), max_tokens, kv_bits, quantized_kv_start.
ROW_OVERRIDES: dict[str, dict] = {
    # PR #40 names "Mistral 7B, 4-bit": v0.3 is the shipped config (v0.1/v0.2 differ in vocab only,
    # 32,000 vs 32,768 rows).
    "r28": {"config": "kvsim/data/configs/mistral-7b-instruct-v0.3.json"},
    "r29": {"config": "kvsim/data/configs/mistral-7b-instruct-v0.3.json"},
    # mlx-examples #1075 introduced --kv-bits with quantized_kv_start 5000 (mlx-lm's default since).
    "r33": {"kv_bits": 8, "quantized_kv_start": 5000},
}


def parse_quantization(text: str | None) -> dict | None:
    """`"4-bit, group 32"` -> {"group_size": 32, "bits": 4}; bf16 / unstated -> None."""
    if not text:
        return None
    bits = re.search(r"(\d+)-bit", text)
    if bits is None:
        return None
    group = re.search(r"group (\d+)", text)
    # mlx_lm.convert's default group size is 64 (the reports' own convention, see their notes).
    return {"group_size": int(group.group(1)) if group else 64, "bits": int(bits.group(1))}


def atomic_write_json(path: Path, obj: object) -> None:
    """Write `obj` as JSON to `path` through a temp file in the same folder."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(obj, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    os.replace(tmp, path)


def derived_config(base_rel: str, quant: dict | None) -> str:
    """The config kvsim runs: the base itself, or a copy beside it with `quantization` added."""
    if quant is None:
        return base_rel
    base_path = ROOT_DIR / base_rel
    suffix = f"-{quant['bits']}bit" + ("" if quant["group_size"] == 64 else f"-g{quant['group_size']}")
    out_path = PUBLIC_CONFIGS_DIR / (base_path.stem + suffix + ".json")
    if not out_path.exists():
        cfg = json.loads(base_path.read_text())
        cfg["_derived"] = (
            f"{base_path.name} verbatim, plus the MLX conversion's quantization block "
            f"(bits {quant['bits']}, group {quant['group_size']}: from the report's stated quantization; "
            "group 64 = mlx_lm.convert's default where none is stated)")
        cfg["quantization"] = dict(quant)
        atomic_write_json(out_path, cfg)
    return str(out_path.relative_to(ROOT_DIR))


def run_args(report: dict) -> list[str] | None:
    """The `kvsim generate` arguments for a report, or None when its model config is unknown."""
    over = ROW_OVERRIDES.get(report["id"], {})
    base = over.get("config") or report.get("config_file")
    if base is None:
        return None
    config = derived_config(base, parse_quantization(report.get("quantization")))
    max_tokens = report.get("generated_tokens") or over.get("max_tokens", DEFAULT_MAX_TOKENS)
    args = ["--model", config, "--prompt-tokens", str(report["prompt_tokens"]),
            "--max-tokens", str(max_tokens),
            "--prefill-step-size", str(report["prefill_step_size"]), "--backend", "mlx-metal"]
    if "kv_bits" in over:
        args += ["--kv-bits", str(over["kv_bits"]), "--quantized-kv-start", str(over["quantized_kv_start"])]
    return args


def unit_divisor(report: dict) -> float:
    """Bytes per printed unit: 2**30 where the report printed GiB, else 1e9."""
    return float(2**30) if "GiB" in (report.get("peak_unit") or "") else 1e9


def predict(args: list[str]) -> dict:
    """One `kvsim generate --json` run; its JSON object."""
    out = subprocess.run([str(KVSIM_BIN), "generate", *args, "--json"], cwd=ROOT_DIR,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def fill_row(report: dict, args: list[str]) -> None:
    """Run kvsim for one report and store the prediction, its unit conversion and the error."""
    start_s = time.monotonic()
    result = predict(args)
    div = unit_divisor(report)
    report["kvsim_peak_gb"] = round(result["peak_bytes"] / div, 3)
    report["kvsim_error_pct"] = round(100.0 * (report["kvsim_peak_gb"] / report["peak_gb"] - 1.0), 1)
    report["kvsim_run"] = {
        "args": args,
        "peak_bytes": result["peak_bytes"], "weights_bytes": result["weights_bytes"],
        "kv_bytes": result["kv_bytes"], "transient_bytes": result["transient_bytes"],
        "peak_phase": result["peak_phase"], "peak_offset": result["peak_offset"],
        "wall_s": round(time.monotonic() - start_s, 1),
    }


def main(ids: list[str]) -> None:
    """Predict the requested rows (all predictable ones by default), saving after each."""
    reports = json.loads(REPORTS_PATH.read_text())
    for report in reports:
        args = run_args(report)
        if args is None or (ids and report["id"] not in ids):
            continue
        fill_row(report, args)
        atomic_write_json(REPORTS_PATH, reports)
        print(report["id"], report["peak_gb"], report["kvsim_peak_gb"], report["kvsim_error_pct"],
              report["kvsim_run"]["wall_s"], flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
