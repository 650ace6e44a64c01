#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): an eighteenth held-out set, predicted before it is measured
# (predictions/heldout18.jsonl) under the profile that plays a process's first eval with MLX's graph cache
# (model_instantiate_s 0.001, its point the fitted play; docs/generation.md, "CUDA: the graph cache, switched on").
# Configs and prompt lengths not measured before: one-chunk prompts of dense, quantized and fenced models, and one
# two-chunk prompt; each generation in a process of its own. Writes $OUT/heldout18.tgz.
DEADLINE_S=${DEADLINE_S:-520}; GEN=gen18; source docs/tools/device/heldout_measure.sh || exit 3
H=docs/tools/device/heldout11; P=kvsim/data/configs/public
m 70 $P/qwen3-4b-4bit.json 3072:3072:16
m 70 $H/llama-3.1-8b-6bit.json 2560:2560:16
m 60 $H/phi-3-mini-4k-instruct-8bit.json 2048:2048:16
m 60 $H/mistral-7b-instruct-v0.3-6bit.json 4096:2048:16
m 40 internlm2_5-7b-chat 2048:2048:16
m 40 granite-3.0-2b-instruct 4096:4096:16
m 40 smollm3-3b 2048:2048:16
m 40 starcoder2-3b 2048:2048:16
cd $OUT && tar czf heldout18.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
