#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a ninth held-out set of full-size generations on configs
# no CUDA run had measured: Gemma-3-4B's text model and Qwen2.5-3B in bfloat16 and Phi-3-mini in 4 bits
# (docs/tools/device/heldout9/), the public Qwen3-4B 6-bit and 5-bit and Qwen3-30B-A3B 5-bit. Predicted under the
# model whose GPU norms and RoPE write into a donatable input (bb711b6), the predictions committed first
# (data/generation/mlx-cuda-0.32.4/predictions/heldout9.jsonl). Each config in a process of its own, its 1K run
# first (the process's first eval), as every stored CUDA run was taken. Configs run in order until DEADLINE_S
# (default 540) is spent. Writes $OUT/heldout9.tgz (gen9/heldout.jsonl).
GEN=gen9; source docs/tools/device/heldout_measure.sh || exit 3
m 70 docs/tools/device/heldout9/gemma-3-4b-it.json
m 60 docs/tools/device/heldout9/qwen2.5-3b-instruct.json
m 90 docs/tools/device/heldout9/phi-3-mini-4k-instruct-4bit.json
m 80 kvsim/data/configs/public/qwen3-4b-6bit.json
m 80 kvsim/data/configs/public/qwen3-4b-5bit.json
m 120 kvsim/data/configs/public/qwen3-30b-a3b-5bit.json
cd $OUT && tar czf heldout9.tgz gen9 gen9-*.log && rm -rf gen9 gen9-*.log; ls -la $OUT
