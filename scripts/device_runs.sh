#!/usr/bin/env bash
# Device call 2 of 2 (after scripts/device_stage.sh, with .whl2 carried): unpack MLX-CUDA, run the
# quantize probe, measure the held-out sweep, then add repeats to the day's default-sweep file.
# Usage: bash scripts/device_runs.sh [HOLDOUT_REPEATS] [DEFAULT_REPEATS] [DEFAULT_FILE]
# Env: OUT (results dir), STAGE, SITE, PY; BUDGET_S (whole call, default 560).
set -uo pipefail
holdout_repeats=${1:-5}; default_repeats=${2:-10}; default_file=${3:-}
py=${PY:-python3}; out=${OUT:?OUT must be set}; budget_s=${BUDGET_S:-560}
t0=$(date +%s)
left() { echo $(( budget_s - ($(date +%s) - t0) )); }
source scripts/device_unpack.sh || exit 3
echo "unpacked in $(( $(date +%s) - t0 )) s"
"$py" -c 'import mlx.core as mx; print(mx.__version__, mx.default_device(), mx.device_info().get("device_name"))'
"$py" scripts/device_probe.py quantize > "$out/quantize-probe.jsonl" 2>&1; cat "$out/quantize-probe.jsonl"
mkdir -p "$out/holdout" "$out/default"
timeout "$(( $(left) * 45 / 100 ))" "$py" -m kvsim.calibrate --sweep holdout --out "$out/holdout" \
  --repeats "$holdout_repeats" --no-progress 2>&1 | tail -3
echo "holdout done after $(( $(date +%s) - t0 )) s"
if [ -n "$default_file" ]; then
  cp "$default_file" "$out/default/"
  date_tag=$(basename "$default_file" .jsonl); date_tag=${date_tag##*-}
  timeout "$(( $(left) - 15 ))" "$py" -m kvsim.calibrate --out "$out/default" --date "$date_tag" \
    --repeats "$default_repeats" --no-progress 2>&1 | tail -3
  echo "default done after $(( $(date +%s) - t0 )) s"
fi
ls -laR "$out"
