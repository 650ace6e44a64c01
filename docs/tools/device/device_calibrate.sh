#!/usr/bin/env bash
# Device call 2 of 2: join the MLX-CUDA archive parts, unpack the small wheels beside it, then run
# `kvsim calibrate` (and docs/tools/bench_policies.py if present) with results written to $OUT.
# Usage (repo root, with .whl2 carried, after docs/tools/device/device_stage.sh):
#   bash docs/tools/device/device_calibrate.sh [REPEATS] [CALIBRATE_TIMEOUT_S] [EXTRA calibrate args...]
# Env: STAGE (default /tmp/stage), SITE (default /tmp/site), PY (default python3), OUT (results dir).
set -uo pipefail
repeats=${1:-3}; budget_s=${2:-420}; shift $(( $# < 2 ? $# : 2 ))
py=${PY:-python3}; out=${OUT:?OUT must be set}
t0=$(date +%s)
source docs/tools/device/device_unpack.sh || exit 3
echo "unpacked in $(( $(date +%s) - t0 )) s"
"$py" - <<'PY' 2>&1 | tee "$out/device.txt"
import json, mlx.core as mx
print("default_device", mx.default_device(), "gpu_available", mx.is_available(mx.gpu))
print("device_info", json.dumps(mx.device_info(), default=str))
a = mx.random.normal((1024, 1024)); mx.eval(a @ a); mx.synchronize()
print("matmul ok; active", mx.get_active_memory(), "peak", mx.get_peak_memory())
from kvsim.calibration.measure import device_info
print("kvsim device_info", json.dumps(device_info()))
PY
timeout "$budget_s" "$py" -m kvsim.cli calibrate --out "$out" --repeats "$repeats" --no-progress "$@" 2>&1 | tee "$out/calibrate.log"
echo "calibrate exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
if [ -f docs/tools/bench_policies.py ]; then
  timeout "${BENCH_TIMEOUT_S:-90}" "$py" docs/tools/bench_policies.py --out "$out" 2>&1 | tee "$out/bench.log"
  echo "bench exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
fi
ls -la "$out"
