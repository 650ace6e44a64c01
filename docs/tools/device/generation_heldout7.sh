#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a seventh held-out set of full-size generations on
# configs no CUDA run had measured: three 8-bit Llamas whose lazy RoPE frequencies fence the first prefill chunk
# (docs/tools/device/heldout7/), a 4-bit Mistral and Qwen3-4B, and GPT-2. Predicted under the model of a3f03d4
# (stream fences) and the predictions committed first (data/generation/mlx-cuda-0.32.4/predictions/heldout7.jsonl).
# Each config in a process of its own, its 1K run first (the process's first eval), as every stored CUDA run was
# taken. Configs run in order until DEADLINE_S (default 540) is spent. Writes $OUT/heldout7.tgz (gen7/heldout.jsonl).
GEN=gen7; source docs/tools/device/heldout_measure.sh || exit 3
if [ -n "${RETRY:-}" ]; then  # the first call's first two processes ran out of time building 8-bit kernels
  m 240 docs/tools/device/heldout7/llama-3.2-1b-instruct-8bit.json
  m 200 docs/tools/device/heldout7/llama-3.2-3b-8bit.json
else
  m 60 docs/tools/device/heldout7/llama-3.2-1b-instruct-8bit.json
  m 70 docs/tools/device/heldout7/llama-3.2-3b-8bit.json
  m 80 docs/tools/device/heldout7/llama-3.1-8b-8bit.json
  m 80 kvsim/data/configs/public/mistral-7b-instruct-v0.3-4bit.json
  m 70 kvsim/data/configs/public/qwen3-4b-4bit.json
  m 60 gpt2
fi
cd $OUT && tar czf heldout7.tgz gen7 gen7-*.log && rm -rf gen7 gen7-*.log; ls -la $OUT
