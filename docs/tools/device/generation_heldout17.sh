#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a seventeenth held-out set, predicted twice before it is
# measured: under the shipped model (predictions/heldout17.jsonl) and under the graph-cache candidate, a first eval
# whose new buffer structures wait for the device, its point on that cold play (heldout17-graph-cache.jsonl:
# model_instantiate_s 0.001, first_eval_point_share 1.0; docs/generation.md, "CUDA: a first eval traced", item 7).
# One-chunk prompts, mostly without lazy RoPE state, where the two disagree by up to 30%; each generation in a process
# of its own. Writes $OUT/heldout17.tgz.
DEADLINE_S=${DEADLINE_S:-520}; GEN=gen17; source docs/tools/device/heldout_measure.sh || exit 3
P=kvsim/data/configs/public
m 170 docs/tools/device/heldout11/qwen3-8b-4bit.json 3072:3072:16
m 60 $P/qwen2.5-7b-4bit.json 2048:2048:16
m 60 $P/mistral-7b-instruct-v0.3-4bit.json 2048:2048:16
m 60 $P/qwen3-4b-8bit.json 2048:2048:16
m 90 qwen3-30b-a3b-4bit 1536:1536:16
m 40 gemma-3-1b-it 2048:2048:16
m 60 qwen3-8b 2048:2048:16
cd $OUT && tar czf heldout17.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
