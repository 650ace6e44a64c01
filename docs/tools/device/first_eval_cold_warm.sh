#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): is a first eval's landing the cold host's, or kvsim's
# fitted play's? chunk_timing.py --runs 3 on one-chunk prompts: the process's first pass (cold), then two warm
# passes of the same chunk on fresh caches, each config in a process of its own (docs/generation.md, "CUDA: a
# first eval cold and warm"). Qwen3-30B-A3B 4-bit at 1K landed 0.16 of the way from floor to fitted play, at 2K
# 0.79; DeepSeek-V2-Lite 4-bit at 2,560 landed 1.05. Writes $OUT/cold-warm.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
start=$(date +%s); deadline=${DEADLINE_S:-540}
nvidia-smi -L | tee $OUT/device.txt
D=docs/tools/device/heldout12/deepseek-v2-lite-chat-4bit.json
run() {  # SECONDS CONFIG TOKENS
  local left=$(( deadline - ($(date +%s) - start) )); local t=$(( left < $1 ? left : $1 ))
  if [ "$t" -lt 30 ]; then echo "$2 skipped: ${left}s left"; return; fi
  timeout "$t" python3 docs/tools/device/chunk_timing.py "$2" --tokens "$3" --step "$3" --runs 3 \
    >> $OUT/cold-warm.jsonl 2>> $OUT/cold-warm.err
  echo "$2 $3 rc $? $(date +%T)"
}
run 170 qwen3-30b-a3b-4bit 1024  # the machine's first quantized process: it builds the kernels
run 110 qwen3-30b-a3b-4bit 1024
run 110 $D 2560
run 110 qwen3-30b-a3b-4bit 2048
run 100 gpt-oss-20b 1536
