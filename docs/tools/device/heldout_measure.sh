#!/usr/bin/env bash
# Sourced by the device scripts that measure generations (generation_heldout4.sh to generation_heldout6.sh,
# generation_repeats2.sh, generation_first_evals.sh; the last two define their own runner beside `m`), after
# docs/tools/device/device_stage.sh: unpack MLX, record the device, and define `m SECONDS CONFIG [WORKLOADS]`,
# which measures CONFIG's generations at full size into $OUT/$GEN in a process of its own (WORKLOADS as
# generation_runs.py takes them, default its 1K and 8K runs, the 1K run first: the process's first eval), until
# DEADLINE_S (default 540) is spent. Env: GEN (the output folder's name), SPLIT (default heldout).
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
start=$(date +%s); deadline=${DEADLINE_S:-540}
nvidia-smi -L | tee $OUT/device.txt
python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device(), mx.device_info().get('device_name'))" | tee -a $OUT/device.txt
m() {
  local left=$(( deadline - ($(date +%s) - start) )); local t=$(( left < $1 ? left : $1 ))
  if [ "$t" -lt 30 ]; then echo "$2 skipped: ${left}s left"; return; fi
  timeout "$t" python3 docs/tools/generation_runs.py measure --split "${SPLIT:-heldout}" --configs "$2" --full-size \
    --workloads "${3:-1024:2048:32,8192:2048:16}" --out "$OUT/$GEN" > "$OUT/$GEN-$(basename "$2" .json).log" 2>&1
  echo "$2 rc $? $(date +%T)"
}
