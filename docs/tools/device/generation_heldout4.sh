#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a fourth held-out set of full-size generations on
# architectures no CUDA run had measured, taken after the first-eval point (first_eval_point_share) was
# settled and its predictions committed (data/generation/mlx-cuda-0.32.4/predictions/heldout4.jsonl). Each config
# in a process of its own, its 1K run first (the process's first eval), as every stored CUDA run was taken.
# Configs run in order until DEADLINE_S (default 540) is spent. Writes $OUT/heldout4.tgz (gen4/heldout.jsonl, logs).
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
start=$(date +%s); deadline=${DEADLINE_S:-540}
nvidia-smi -L | tee $OUT/device.txt
python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device(), mx.device_info().get('device_name'))" | tee -a $OUT/device.txt
m() {
  local left=$(( deadline - ($(date +%s) - start) )); local t=$(( left < $1 ? left : $1 ))
  if [ "$t" -lt 30 ]; then echo "$2 skipped: ${left}s left"; return; fi
  timeout "$t" python3 docs/tools/generation_runs.py measure --split heldout --configs "$2" --full-size \
    --workloads 1024:2048:32,8192:2048:16 --out $OUT/gen4 > "$OUT/gen4-$2.log" 2>&1; echo "$2 rc $? $(date +%T)"
}
m 100 internlm2_5-7b-chat
m 80 smollm3-3b
m 80 granite-3.0-2b-instruct
m 80 starcoder2-3b
m 70 olmo-2-0425-1b
m 70 llama-3.2-1b-instruct-4bit
m 70 phi-2
m 170 mixtral-8x7b-instruct-v0.1
cd $OUT && tar czf heldout4.tgz gen4 gen4-*.log && rm -rf gen4 gen4-*.log; ls -la $OUT
