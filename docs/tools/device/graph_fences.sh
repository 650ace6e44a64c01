#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): do stream fences on a model's lazy RoPE frequencies set
# its first prefill chunk's peak? (docs/tools/device/graph_commits.py, no dot files.) Each process warms its kernels
# on a short generation, then runs one 1K generation on a new model, with the frequencies left lazy (as mlx-lm's
# load leaves them) or evaluated first (--eval-state); two processes each. Writes $OUT/graph-fences.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
g() {  # g CONFIG [ARGS...]: one process
  local cfg=$1; shift
  MLX_SAVE_CUDA_GRAPHS_DOT_FILE= timeout 150 python3 docs/tools/device/graph_commits.py "$cfg" --prompt 1024 \
    --warmup 1 "$@" >> "$OUT/graph-fences.jsonl" 2>> "$OUT/graph-fences.log"
  echo "$cfg $* rc $? $(date +%T)"
}
for rep in 1 2; do
  for cfg in llama-3.2-1b-instruct llama-3.1-8b-instruct kvsim/data/configs/public/llama-3.1-8b-4bit.json \
             kvsim/data/configs/public/llama-3.2-3b-4bit.json; do
    g $cfg
    g $cfg --eval-state
  done
done
ls -la $OUT
