#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a sixth held-out set of full-size generations on
# configs no CUDA run had measured (a small bf16 Llama, three 4-bit dense models, a 4-bit small Qwen3, a float16
# GPT-NeoX, an 8-bit MoE), predicted under the model of 9174820 (unchanged: the measured host time was rejected on
# train) and its predictions committed first (data/generation/mlx-cuda-0.32.4/predictions/heldout6.jsonl). Each config
# in a process of its own, its 1K run first (the process's first eval), as every stored CUDA run was taken.
# Configs run in order until DEADLINE_S (default 540) is spent. Writes $OUT/heldout6.tgz (gen6/heldout.jsonl, logs).
GEN=gen6; source docs/tools/device/heldout_measure.sh || exit 3
m 60 llama-3.2-1b-instruct
m 60 qwen3-0.6b-4bit
m 60 pythia-160m
m 80 kvsim/data/configs/public/llama-3.1-8b-4bit.json
m 80 kvsim/data/configs/public/qwen2.5-7b-4bit.json
m 80 kvsim/data/configs/public/llama-3.2-3b-4bit.json
m 120 kvsim/data/configs/public/qwen3-30b-a3b-8bit.json
cd $OUT && tar czf heldout6.tgz gen6 gen6-*.log && rm -rf gen6 gen6-*.log; ls -la $OUT
