#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): gemma-3-1b-it's 8K generation peaks in one of two modes
# 22% apart, the upper one a spike of about 1.07 GB in the third prefill chunk, the size of a 2,048-token chunk's
# bf16 logits over its 262,144-token vocabulary (which a prefill chunk does not compute). The same generation with
# the vocabulary cut to 8,192 (gemma-3-1b-it-vocab8k.json): does the spike go with it? Three fresh processes each,
# alternating, every eval's peak (docs/tools/device/graph_commits.py, no dot files). Writes $OUT/gemma-spike.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
for rep in 1 2 3; do
  for cfg in gemma-3-1b-it docs/tools/device/gemma-3-1b-it-vocab8k.json; do
    MLX_SAVE_CUDA_GRAPHS_DOT_FILE= timeout 100 python3 docs/tools/device/graph_commits.py "$cfg" --prompt 8192 \
      >> "$OUT/gemma-spike.jsonl" 2>> "$OUT/gemma-spike.log"
    echo "$cfg rc $? $(date +%T)"
  done
done
ls -la $OUT
