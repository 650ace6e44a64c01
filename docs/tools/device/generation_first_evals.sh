#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): is a 1K generation's low peak its process's first eval?
# The sixth held-out set's bf16 Llama-3.2-1B peaked at 1K 0.17 GB above its weights, 2.7x under kvsim's floor
# (0.44 GB). Three 1K generations in one process (the first one the process's first eval, then warm kernels),
# for Llama-3.2-1B bf16 and Llama-3.1-8B 4-bit, each at MLX's defaults and with MLX_MAX_OPS_PER_BUFFER=400.
# With LIMITS=1: the bf16 model again with MLX's element limit raised, CUDA graphs off, and 10 ops a buffer.
# Writes $OUT/first-evals.tgz (first/<tag>/repeat.jsonl, logs).
GEN=first; source docs/tools/device/heldout_measure.sh || exit 3
f() {  # f TAG CONFIG [ENV...]: one process, three 1K generations
  local tag=$1 cfg=$2; shift 2
  env "$@" timeout 150 python3 docs/tools/generation_runs.py measure --split repeat --configs "$cfg" --full-size \
    --workloads 1024:2048:32,1024:2048:32,1024:2048:32 --out "$OUT/$GEN/$tag" > "$OUT/$GEN-$tag.log" 2>&1
  echo "$tag rc $? $(date +%T)"
}
if [ -n "${LIMITS:-}" ]; then  # second call: what cuts the bf16 model's command buffers
  f llama1b-mb100000 llama-3.2-1b-instruct MLX_MAX_MB_PER_BUFFER=100000
  f llama1b-nographs llama-3.2-1b-instruct MLX_USE_CUDA_GRAPHS=0
  f llama1b-ops10 llama-3.2-1b-instruct MLX_MAX_OPS_PER_BUFFER=10
else
  f llama1b llama-3.2-1b-instruct
  f llama1b-ops400 llama-3.2-1b-instruct MLX_MAX_OPS_PER_BUFFER=400
  f llama8b4 kvsim/data/configs/public/llama-3.1-8b-4bit.json
  f llama8b4-ops400 kvsim/data/configs/public/llama-3.1-8b-4bit.json MLX_MAX_OPS_PER_BUFFER=400
fi
cd $OUT && tar czf first-evals.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
