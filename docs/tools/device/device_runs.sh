#!/usr/bin/env bash
# Device call 2 of 2 (after docs/tools/device/device_stage.sh, with .whl2 carried): unpack MLX-CUDA, then
# measure calibration sweeps into $OUT/<sweep>/, each resuming a file it is given.
# Usage: bash docs/tools/device/device_runs.sh SWEEP:REPEATS[:FILE_TO_RESUME] ...
#   e.g. bash docs/tools/device/device_runs.sh holdout2:5 holdout:10:data/holdout/mlx-cuda-0.32.4-20261129.jsonl
# Env: OUT (results dir), STAGE, SITE, PY; BUDGET_S (whole call, default 560); PROBE=1 also runs
# the quantize probe of docs/tools/device/device_probe.py.
set -uo pipefail
py=${PY:-python3}; out=${OUT:?OUT must be set}; budget_s=${BUDGET_S:-560}
t0=$(date +%s)
left() { echo $(( budget_s - ($(date +%s) - t0) )); }
source docs/tools/device/device_unpack.sh || exit 3
echo "unpacked in $(( $(date +%s) - t0 )) s"
"$py" -c 'import mlx.core as mx; print(mx.__version__, mx.default_device(), mx.device_info().get("device_name"))'
if [ -n "${PROBE:-}" ]; then
  "$py" docs/tools/device/device_probe.py quantize > "$out/quantize-probe.jsonl" 2>&1; cat "$out/quantize-probe.jsonl"
fi
n=$#; i=0
for spec in "$@"; do
  IFS=: read -r sweep repeats resume <<< "$spec"
  i=$(( i + 1 )); share=$(( $(left) / (n - i + 1) - 5 ))  # split what is left evenly between the sweeps to go
  mkdir -p "$out/$sweep"; date_args=()
  if [ -n "$resume" ]; then
    cp "$resume" "$out/$sweep/"
    tag=$(basename "$resume" .jsonl); date_args=(--date "${tag##*-}")
  fi
  timeout "$share" "$py" -m kvsim.cli calibrate --sweep "$sweep" --out "$out/$sweep" --repeats "$repeats" \
    "${date_args[@]}" --no-progress 2>&1 | tail -3
  echo "$sweep done after $(( $(date +%s) - t0 )) s"
done
ls -laR "$out"
