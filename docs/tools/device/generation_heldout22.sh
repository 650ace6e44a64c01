#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a twenty-second held-out set, predicted before it is measured
# (predictions/heldout22.jsonl under the shipped profile; predictions/heldout22-b.jsonl under candidate B of
# docs/generation.md, "CUDA: the device's and the host's times per command buffer, traced": measured device and host
# times, docs/tools/timing_study/predict_b.py). Prompts of two to four 2,048-token chunks, new to the stored runs. Each
# generation in a process of its own. Writes $OUT/heldout22.tgz.
DEADLINE_S=${DEADLINE_S:-540}; GEN=gen22; source docs/tools/device/heldout_measure.sh || exit 3
P=kvsim/data/configs/public
m 90 $P/qwen3-4b-8bit.json 6144:2048:16
m 80 $P/llama-3.2-3b-4bit.json 6144:2048:16
m 100 mistral-7b-instruct-v0.3-8bit 4096:2048:16
m 90 qwen3-8b 6144:2048:16
m 40 granite-3.0-2b-instruct 6144:2048:16
m 50 gemma-2-2b-it 4096:2048:16
m 30 qwen2.5-0.5b-instruct 8192:2048:16
cd $OUT && tar czf heldout22.tgz gen22 gen22-*.log && rm -rf gen22 gen22-*.log; ls -la $OUT
