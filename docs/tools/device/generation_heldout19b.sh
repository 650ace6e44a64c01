#!/usr/bin/env bash
# Device call 3, on the machine generation_heldout19.sh left warm: the four runs of the nineteenth held-out set that
# ran out of time there building their quantized kernels (a fresh machine; MLX keeps them under /tmp/mlx), and the
# eager-loading Gemma. Same predictions (predictions/heldout19.jsonl). Writes $OUT/heldout19b.tgz.
DEADLINE_S=${DEADLINE_S:-540}; GEN=gen19; source docs/tools/device/heldout_measure.sh || exit 3
H11=docs/tools/device/heldout11; P=kvsim/data/configs/public
m 100 $H11/gemma-3-1b-it-4bit.json 2048:2048:16
m 100 $P/qwen3-4b-6bit.json 2048:2048:16
m 120 $H11/qwen3-8b-4bit.json 1536:1536:16
m 120 $H11/qwen2.5-7b-8bit.json 2048:2048:16
GEN=eager19 CUDA_MODULE_LOADING=EAGER m 80 $H11/gemma-3-1b-it-4bit.json 2048:2048:16
cd $OUT && tar czf heldout19b.tgz gen19 eager19 gen19-*.log eager19-*.log && rm -rf gen19 eager19 gen19-*.log eager19-*.log; ls -la $OUT
