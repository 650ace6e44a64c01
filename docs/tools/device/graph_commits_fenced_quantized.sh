#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the fenced, quantized Llama-3.2-1B's 1K first eval peaks at
# kvsim's latest-free play in every process (4 and 6 bits; docs/generation.md, "CUDA: a first eval's range on its
# point"), where the bf16 one peaks near its floor. MLX's graphs for the 4-bit, 6-bit and bf16 1K generations, each in
# a process of its own (every eval's buffers and peak, as graph_commits.sh), then the 6-bit one without dot files.
# Writes $OUT/graph-commits-fenced.jsonl.
NAME=graph-commits-fenced; source docs/tools/device/graph_commits_run.sh || exit 3
g l1b-4bit llama-3.2-1b-instruct-4bit 1024
g l1b-6bit docs/tools/device/heldout11/llama-3.2-1b-instruct-6bit.json 1024
g l1b-bf16 llama-3.2-1b-instruct 1024
p plain docs/tools/device/heldout11/llama-3.2-1b-instruct-6bit.json 1024
ls -la $OUT
