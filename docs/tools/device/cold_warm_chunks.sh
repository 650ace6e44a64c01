#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): is a cold prompt chunk's host cost the CUDA graphs it
# instantiates? Gemma-3-4B's 8K chunks cold and warm (docs/tools/device/chunk_timing.py --runs 3) with CUDA graphs off
# (MLX_USE_CUDA_GRAPHS=0: every kernel launched alone, nothing instantiated), and, graphs on, two models whose attention
# is cuDNN's fused kernel: bf16 Llama-3.2-3B and Qwen3-8B (docs/generation.md, "CUDA: cold chunks"). Writes
# $OUT/chunk-timing-cold-warm.jsonl (one JSON line per chunk; the header line names the environment).
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
f=$OUT/chunk-timing-cold-warm.jsonl
c() {  # c ENV CONFIG: one process, its env recorded on a line of its own
  echo "{\"env\": \"$1\", \"config\": \"$2\"}" >> $f
  env $1 timeout 150 python3 docs/tools/device/chunk_timing.py "$2" --tokens 8192 --runs 3 >> $f 2>> $OUT/cold-warm.log
  echo "$2 $1 rc $? $(date +%T)"
}
c MLX_USE_CUDA_GRAPHS=0 docs/tools/device/heldout9/gemma-3-4b-it.json
c MLX_USE_CUDA_GRAPHS=1 kvsim/data/configs/public/llama-3.2-3b.json
c MLX_USE_CUDA_GRAPHS=1 qwen3-8b
ls -la $OUT
