#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a fourteenth held-out set, predicted with the task
# throttle's first-eval rule (predictions/heldout14.jsonl, committed before this call): one prompt chunk as long as the
# prompt (--prefill-step-size 4096 or 8192), so that the process's first eval is the peak. Qwen3-30B-A3B in 4 and 8 bits
# at 4K and 8K, which kvsim finds bound by MLX's ten tasks in flight at every host pace; three controls it does not:
# Qwen3-30B-A3B bf16, DeepSeek-V2-Lite 4-bit and Llama-3.1-8B 4-bit at 4K. Each generation in a process of its own.
# PART=1: the 4- and 8-bit Qwen3-30B-A3B; PART=2 (a later call on the same machine): the controls.
# Writes $OUT/heldout14-$PART.tgz.
DEADLINE_S=${DEADLINE_S:-560}; GEN=gen14-${PART:?PART=1 or 2}; source docs/tools/device/heldout_measure.sh || exit 3
P=kvsim/data/configs/public
if [ "$PART" = 1 ]; then
  for c in qwen3-30b-a3b-4bit $P/qwen3-30b-a3b-8bit.json; do m 130 $c 4096:4096:16; m 130 $c 8192:8192:16; done
else
  m 200 qwen3-30b-a3b 4096:4096:16
  m 150 docs/tools/device/heldout12/deepseek-v2-lite-chat-4bit.json 4096:4096:16
  m 120 $P/llama-3.1-8b-4bit.json 4096:4096:16
fi
cd $OUT && tar czf heldout14-$PART.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
