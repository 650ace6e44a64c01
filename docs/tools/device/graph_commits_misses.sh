#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the CUDA graphs MLX commits in three runs kvsim still misses
# (docs/generation.md, "CUDA: stream fences"): olmo-2-0425-1b at 1K (float32, its point +4.0% and its range above the
# real peak), phi-2 at 8K (-16.1%) and Qwen3-4B 4-bit at 1K (+17.3%); every eval's buffers and peak, as
# graph_commits.sh. Writes $OUT/graph-commits-misses.jsonl.
NAME=graph-commits-misses; source docs/tools/device/graph_commits_run.sh || exit 3
g olmo2-1k olmo-2-0425-1b 1024
g phi2-8k phi-2 8192
g qwen3-4b-4bit-1k kvsim/data/configs/public/qwen3-4b-4bit.json 1024
ls -la $OUT
