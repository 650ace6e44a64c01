#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): does a stream fence change the quantized Llama-3.2-1B's
# first eval, as it does bf16's, and is a first eval's low peak CUDA graphs' cold host? (graph_commits.py, no dot
# files, --warmup 1 as graph_fences.sh.) Llama-3.2-1B's 1K generation in 4, 6 and 8 bits with the RoPE frequencies
# left lazy or evaluated first (--eval-state), and with CUDA graphs off (MLX_USE_CUDA_GRAPHS=0), each in a process
# of its own. Writes $OUT/fences-quantized-1b.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
g() {  # g ENV CONFIG [ARGS...]: one process; ENV is an env assignment or "-"
  local env=$1 cfg=$2; shift 2
  [ "$env" = - ] && env=KVSIM_PLAIN=1
  env $env MLX_SAVE_CUDA_GRAPHS_DOT_FILE= timeout 120 python3 docs/tools/device/graph_commits.py "$cfg" \
    --prompt 1024 --warmup 1 "$@" >> "$OUT/fences-quantized-1b.jsonl" 2>> "$OUT/fences-quantized-1b.log"
  echo "$env $cfg $* rc $? $(date +%T)"
}
q4=kvsim/data/configs/llama-3.2-1b-instruct-4bit.json
q6=docs/tools/device/heldout11/llama-3.2-1b-instruct-6bit.json
q8=docs/tools/device/heldout7/llama-3.2-1b-instruct-8bit.json
bf=kvsim/data/configs/llama-3.2-1b-instruct.json
for rep in 1 2; do
  for cfg in $q4 $q6; do g - $cfg; g - $cfg --eval-state; done
done
g - $q8; g - $q8 --eval-state
for cfg in $q4 $q6 $bf; do g MLX_USE_CUDA_GRAPHS=0 $cfg; g MLX_USE_CUDA_GRAPHS=0 $cfg --eval-state; done
ls -la $OUT
