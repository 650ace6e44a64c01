#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a fifth held-out set of full-size generations on
# configs no CUDA run had measured, taken after kvsim's CUDA buffers followed MLX's (model_mlx_elements, 10 in
# flight) and float32 GEMMs made its host wait (model_waiting_gemms), with its predictions committed
# (data/generation/mlx-cuda-0.32.4/predictions/heldout5.jsonl). Each config in a process of its own, its 1K run first (the process's first eval), as every stored CUDA run was taken.
# Configs run in order until DEADLINE_S (default 540) is spent. Writes $OUT/heldout5.tgz (gen5/heldout.jsonl, logs).
GEN=gen5; source docs/tools/device/heldout_measure.sh || exit 3
m 80 kvsim/data/configs/public/llama-3.2-3b.json
m 80 kvsim/data/configs/public/qwen3-4b.json
m 60 stablelm-2-1_6b
m 60 qwen2.5-0.5b-instruct
m 60 mamba-130m-hf
m 60 qwen3-0.6b
m 60 docs/tools/device/llama-3.2-1b-instruct-float32.json
cd $OUT && tar czf heldout5.tgz gen5 gen5-*.log && rm -rf gen5 gen5-*.log; ls -la $OUT
