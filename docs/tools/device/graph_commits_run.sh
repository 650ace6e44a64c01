#!/usr/bin/env bash
# Sourced by graph_commits_misses.sh, graph_commits_phi3.sh, gemma4b_8k.sh and graph_commits_fenced_quantized.sh
# (device call 2, after device_stage.sh): unpack MLX,
# record the device, and define `g TAG CONFIG PROMPT`, which runs graph_commits.py on CONFIG's PROMPT-token
# generation in a process of its own with dot files, appending its JSON line to $OUT/$NAME.jsonl, and `p TAG CONFIG
# PROMPT`, the same without dot files (they slow the host). Env: NAME.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
g() {
  MLX_SAVE_CUDA_GRAPHS_DOT_FILE=/tmp/dots-$1/g timeout 200 python3 docs/tools/device/graph_commits.py "$2" \
    --prompt "$3" --keep-evals 4 >> "$OUT/$NAME.jsonl" 2>> "$OUT/$NAME.log"
  echo "$1 rc $? $(date +%T)"
}
p() {
  MLX_SAVE_CUDA_GRAPHS_DOT_FILE= timeout 120 python3 docs/tools/device/graph_commits.py "$2" --prompt "$3" \
    >> "$OUT/$NAME.jsonl" 2>> "$OUT/$NAME.log"
  echo "$1 rc $? $(date +%T)"
}
