#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): an eleventh held-out set, predicted under the first eval's
# range placed on its point (predictions/heldout11.jsonl, committed before this call): eight quantized configs no
# CUDA run had measured (docs/tools/device/heldout11/), each 1K generation in a process of its own (its first eval
# peaks), then the 6-bit Llama-3.2-1B twice more (the 4-bit one varies 19% across processes). Writes $OUT/heldout11.tgz.
DEADLINE_S=${DEADLINE_S:-560}; GEN=gen11; source docs/tools/device/heldout_measure.sh || exit 3
W=1024:2048:32
for c in llama-3.2-1b-instruct-6bit llama-3.1-8b-6bit llama-3.2-3b-6bit qwen3-8b-4bit qwen2.5-7b-8bit \
         mistral-7b-instruct-v0.3-6bit gemma-3-1b-it-4bit phi-3-mini-4k-instruct-8bit; do
  m 90 docs/tools/device/heldout11/$c.json $W
done
GEN=rep11
for i in 1 2; do m 40 docs/tools/device/heldout11/llama-3.2-1b-instruct-6bit.json $W; done
cd $OUT && tar czf heldout11.tgz gen11 rep11 gen11-*.log rep11-*.log && rm -rf gen11 rep11 gen11-*.log rep11-*.log; ls -la $OUT
