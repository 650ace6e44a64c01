#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the CUDA graphs MLX commits for Phi-3-mini at 8K in 4 bits
# (the ninth held-out set's miss, -22%: its real run holds 5 GB more than the bf16 model's) and in bfloat16 (train),
# every eval's buffers and peak, as graph_commits.sh. Writes $OUT/graph-commits-phi3.jsonl.
NAME=graph-commits-phi3; source docs/tools/device/graph_commits_run.sh || exit 3
g phi3-4bit-8k docs/tools/device/heldout9/phi-3-mini-4k-instruct-4bit.json 8192
g phi3-8k phi-3-mini-4k-instruct 8192
ls -la $OUT
