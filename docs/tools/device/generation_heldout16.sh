#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a sixteenth held-out set, predicted with a fenced first
# eval held by the 42 command buffers cuGraphLaunch lets in flight, quantized models fenced, and a fenced first
# eval's point on its fitted play (predictions/heldout16.jsonl, committed before this call). One-chunk prompts of
# five models with lazy RoPE state (Llama 3.x in 4, 8 and 16 bits, DeepSeek-V2-Lite 4-bit, gpt-oss-20b) and one
# without (Qwen3-8B 4-bit, a control), each generation in a process of its own. Writes $OUT/heldout16.tgz.
DEADLINE_S=${DEADLINE_S:-520}; GEN=gen16; source docs/tools/device/heldout_measure.sh || exit 3
P=kvsim/data/configs/public
m 170 $P/llama-3.1-8b-4bit.json 3072:3072:16
m 70 docs/tools/device/heldout7/llama-3.2-3b-8bit.json 2048:2048:16
m 90 docs/tools/device/heldout12/deepseek-v2-lite-chat-4bit.json 3328:3328:16
m 70 gpt-oss-20b 1408:2048:16
m 50 llama-3.2-1b-instruct-4bit 2048:2048:16
m 50 $P/llama-3.2-3b.json 2048:2048:16
m 60 docs/tools/device/heldout11/qwen3-8b-4bit.json 2048:2048:16
cd $OUT && tar czf heldout16.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
