#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): an eighth held-out set of full-size generations on
# configs no CUDA run had measured: three small bfloat16 models (docs/tools/device/heldout8/: Qwen3-1.7B,
# SmolLM2-1.7B, Qwen2.5-1.5B), the public Qwen3-4B 8-bit and Qwen3-30B-A3B 6-bit, and Qwen3-4B 5-bit in groups of
# 32. Predicted under the model that fuses compiled functions on CUDA and counts a concatenation's graph nodes,
# the predictions committed first (data/generation/mlx-cuda-0.32.4/predictions/heldout8.jsonl). Each config in a
# process of its own, its 1K run first (the process's first eval), as every stored CUDA run was taken. Configs run
# in order until DEADLINE_S (default 540) is spent. Writes $OUT/heldout8.tgz (gen8/heldout.jsonl).
GEN=gen8; source docs/tools/device/heldout_measure.sh || exit 3
m 60 docs/tools/device/heldout8/qwen3-1.7b.json
m 60 docs/tools/device/heldout8/smollm2-1.7b.json
m 60 docs/tools/device/heldout8/qwen2.5-1.5b-instruct.json
m 90 kvsim/data/configs/public/qwen3-4b-8bit.json
m 90 kvsim/data/configs/public/qwen3-4b-5bit-g32.json
m 120 kvsim/data/configs/public/qwen3-30b-a3b-6bit.json
cd $OUT && tar czf heldout8.tgz gen8 gen8-*.log && rm -rf gen8 gen8-*.log; ls -la $OUT
