#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a nineteenth held-out set, predicted before it is measured
# (predictions/heldout19.jsonl, under the profile whose first-eval instantiations leave the newest graph running:
# model_instantiate_overlap_buffers 1; predictions/heldout19-overlap0.jsonl: the rule before it). One-chunk prompts of
# configs and lengths not measured before, each generation in a process of its own. Then two of them again with
# CUDA_MODULE_LOADING=EAGER (the kernels loaded when the process starts, not at their first use; folder eager19).
# Writes $OUT/heldout19.tgz.
DEADLINE_S=${DEADLINE_S:-540}; GEN=gen19; source docs/tools/device/heldout_measure.sh || exit 3
H8=docs/tools/device/heldout8; H9=docs/tools/device/heldout9; H11=docs/tools/device/heldout11; P=kvsim/data/configs/public
m 40 $H11/gemma-3-1b-it-4bit.json 2048:2048:16
m 50 $P/qwen3-4b-6bit.json 2048:2048:16
m 50 $H11/qwen3-8b-4bit.json 1536:1536:16
m 50 $H9/qwen2.5-3b-instruct.json 2048:2048:16
m 60 $H11/qwen2.5-7b-8bit.json 2048:2048:16
m 60 mistral-7b-instruct-v0.3-8bit 2048:2048:16
m 40 $H8/qwen3-1.7b.json 2048:2048:16
m 50 $P/qwen3-4b-5bit.json 3072:3072:16
m 40 $H8/smollm2-1.7b.json 2048:2048:16
m 50 $P/qwen3-4b.json 2048:2048:16
GEN=eager19 CUDA_MODULE_LOADING=EAGER m 40 $H11/gemma-3-1b-it-4bit.json 2048:2048:16
GEN=eager19 CUDA_MODULE_LOADING=EAGER m 50 $P/qwen3-4b-6bit.json 2048:2048:16
cd $OUT && tar czf heldout19.tgz gen19 eager19 gen19-*.log eager19-*.log && rm -rf gen19 eager19 gen19-*.log eager19-*.log; ls -la $OUT
