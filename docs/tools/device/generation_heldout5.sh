#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a fifth held-out set of full-size generations on
# configs no CUDA run had measured, taken after kvsim's CUDA buffers followed MLX's (model_mlx_elements, 10 in
# flight) and float32 GEMMs made its host wait (model_waiting_gemms), with its predictions committed
# (data/generation/mlx-cuda-0.32.4/predictions/heldout5.jsonl). Each config in a process of its own, its 1K run first (the process's first eval), as every stored CUDA run was taken.
# Configs run in order until DEADLINE_S (default 540) is spent. Writes $OUT/heldout5.tgz (gen5/heldout.jsonl, logs).
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
start=$(date +%s); deadline=${DEADLINE_S:-540}
nvidia-smi -L | tee $OUT/device.txt
python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device(), mx.device_info().get('device_name'))" | tee -a $OUT/device.txt
m() {
  local left=$(( deadline - ($(date +%s) - start) )); local t=$(( left < $1 ? left : $1 ))
  if [ "$t" -lt 30 ]; then echo "$2 skipped: ${left}s left"; return; fi
  timeout "$t" python3 docs/tools/generation_runs.py measure --split heldout --configs "$2" --full-size \
    --workloads 1024:2048:32,8192:2048:16 --out $OUT/gen5 > "$OUT/gen5-$(basename $2 .json).log" 2>&1; echo "$2 rc $? $(date +%T)"
}
m 80 kvsim/data/configs/public/llama-3.2-3b.json
m 80 kvsim/data/configs/public/qwen3-4b.json
m 60 stablelm-2-1_6b
m 60 qwen2.5-0.5b-instruct
m 60 mamba-130m-hf
m 60 qwen3-0.6b
m 60 docs/tools/device/llama-3.2-1b-instruct-float32.json
cd $OUT && tar czf heldout5.tgz gen5 gen5-*.log && rm -rf gen5 gen5-*.log; ls -la $OUT
