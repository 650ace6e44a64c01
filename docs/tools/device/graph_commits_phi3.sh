#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the CUDA graphs MLX commits for Phi-3-mini at 8K in 4 bits
# (the ninth held-out set's miss, -22%: its real run holds 5 GB more than the bf16 model's) and in bfloat16 (train),
# every eval's buffers and peak, as graph_commits.sh. Writes $OUT/graph-commits-phi3.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
g() {  # g TAG CONFIG PROMPT: one process, dot files
  MLX_SAVE_CUDA_GRAPHS_DOT_FILE=/tmp/dots-$1/g timeout 200 python3 docs/tools/device/graph_commits.py "$2" \
    --prompt "$3" --keep-evals 4 >> "$OUT/graph-commits-phi3.jsonl" 2>> "$OUT/graph-commits-phi3.log"
  echo "$1 rc $? $(date +%T)"
}
g phi3-4bit-8k docs/tools/device/heldout9/phi-3-mini-4k-instruct-4bit.json 8192
g phi3-8k phi-3-mini-4k-instruct 8192
ls -la $OUT
