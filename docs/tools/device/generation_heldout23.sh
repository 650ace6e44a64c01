#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a twenty-third held-out set, predicted before it is measured
# (predictions/heldout23.jsonl under the shipped profile; predictions/heldout23-d.jsonl under candidate D of
# docs/generation.md, "CUDA: each phase's peak, and a host fitted per op class": docs/tools/timing_study/predict_d.py).
# Prompts of two to six 2,048-token chunks, new to the stored runs: four small dense models (the host keeps pace with
# the device), a quantized one and three larger dense ones. Each generation in a process of its own, each phase's peak
# recorded. Writes $OUT/heldout23.tgz.
DEADLINE_S=${DEADLINE_S:-540}; GEN=gen23; source docs/tools/device/heldout_measure.sh || exit 3
H8=docs/tools/device/heldout8; H9=docs/tools/device/heldout9; P=kvsim/data/configs/public
m 40 llama-3.2-1b-instruct 6144:2048:16
m 45 $H8/qwen3-1.7b.json 6144:2048:16
m 45 $H8/smollm2-1.7b.json 4096:2048:16
m 50 gemma-3-1b-it 12288:2048:16
m 90 $P/qwen3-4b-5bit.json 6144:2048:16
m 60 llama-3.1-8b-instruct 4096:2048:16
m 60 $H9/qwen2.5-3b-instruct.json 6144:2048:16
m 70 $H9/gemma-3-4b-it.json 4096:2048:16
cd $OUT && tar czf heldout23.tgz gen23 gen23-*.log && rm -rf gen23 gen23-*.log; ls -la $OUT
