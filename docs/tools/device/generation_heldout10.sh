#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a tenth held-out set, long prompts. Before it one CUDA
# generation had been measured above 8K tokens (bf16 Llama-3.1-8B at 32K). Full size, each config in a process of
# its own, its 1K run first (the process's first eval), then 16K and 32K: bf16 Qwen3-8B, Mistral-7B, Qwen2.5-7B
# and Llama-3.2-3B, the public 4-bit Llama-3.1-8B and Qwen3-30B-A3B, and gemma-3-1b (sliding window). Predicted
# under the model whose donated SliceUpdate counts only its update toward a command buffer, the predictions committed
# first (data/generation/mlx-cuda-0.32.4/predictions/heldout10.jsonl). Then MLX's committed CUDA graphs of bf16
# Llama-3.1-8B's 32K generation (graph_commits.py), which that model changes. Writes $OUT/heldout10.tgz
# (gen10/heldout.jsonl) and $OUT/graph-commits-32k.jsonl.
GEN=gen10; DEADLINE_S=${DEADLINE_S:-470}; source docs/tools/device/heldout_measure.sh || exit 3
W=1024:2048:32,16384:2048:16,32768:2048:16
m 70 kvsim/data/configs/qwen3-8b.json $W
m 60 kvsim/data/configs/mistral-7b-instruct-v0.3.json $W
m 60 kvsim/data/configs/qwen2.5-7b-instruct.json $W
m 50 kvsim/data/configs/public/llama-3.2-3b.json $W
m 60 kvsim/data/configs/public/llama-3.1-8b-4bit.json $W
m 90 kvsim/data/configs/public/qwen3-30b-a3b-4bit.json $W
m 40 kvsim/data/configs/gemma-3-1b-it.json $W
MLX_SAVE_CUDA_GRAPHS_DOT_FILE=/tmp/dots-32k/g timeout 90 python3 docs/tools/device/graph_commits.py \
  llama-3.1-8b-instruct --prompt 32768 --keep-evals 0 > $OUT/graph-commits-32k.jsonl 2> $OUT/graph-commits-32k.log
echo "graph commits rc $? $(date +%T)"
cd $OUT && tar czf heldout10.tgz gen10 gen10-*.log && rm -rf gen10 gen10-*.log; ls -la $OUT
