#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a twelfth held-out set, predicted with a quantized model
# played without stream fences (predictions/heldout12.jsonl, committed before this call): fenced (Llama 3.x, YarnRoPE)
# and quantized configs no CUDA run had measured, each generation in a process of its own, its first eval the peak.
# PART=1: 5-bit Llama-3.2-1B, -3.2-3B and -3.1-8B at 1K (docs/tools/device/heldout12/), the 4-bit and 8-bit
# Llama-3.2-1B at 1,536 tokens; PART=2 (a later call on the same machine): DeepSeek-V2-Lite 4-bit at 1K, the 4-bit
# Llama-3.1-8B at 1,536 and gpt-oss-20b at 2,000. Writes $OUT/heldout12-$PART.tgz.
DEADLINE_S=${DEADLINE_S:-560}; GEN=gen12-${PART:?PART=1 or 2}; source docs/tools/device/heldout_measure.sh || exit 3
H=docs/tools/device/heldout12
if [ "$PART" = 1 ]; then
  for c in llama-3.2-1b-instruct-5bit llama-3.2-3b-5bit llama-3.1-8b-5bit; do m 150 $H/$c.json 1024:2048:32; done
  m 100 llama-3.2-1b-instruct-4bit 1536:2048:32
  m 100 docs/tools/device/heldout7/llama-3.2-1b-instruct-8bit.json 1536:2048:32
else
  m 200 $H/deepseek-v2-lite-chat-4bit.json 1024:2048:32
  m 120 kvsim/data/configs/public/llama-3.1-8b-4bit.json 1536:2048:32
  m 200 gpt-oss-20b 2000:2048:32
fi
cd $OUT && tar czf heldout12-$PART.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
