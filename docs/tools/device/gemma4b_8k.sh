#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): Gemma-3-4B's text model at 8K tokens peaks 2.9-3.4 GB above
# its weights in four processes, under kvsim's range (fitted play 5.3 GB; docs/generation.md, "CUDA: long prompts").
# Are its command buffers MLX's, and is its host level with its device? Its 8K generation with the graphs dumped
# (every eval's buffers and peak), twice more without dot files (the dumps slow the host), and its prefill chunks
# timed (host encode against wall, docs/tools/device/chunk_timing.py). Writes $OUT/graph-commits-gemma4b.jsonl and
# $OUT/chunk-timing-gemma4b.jsonl.
NAME=graph-commits-gemma4b; source docs/tools/device/graph_commits_run.sh || exit 3
CFG=docs/tools/device/heldout9/gemma-3-4b-it.json
g gemma4b-8k $CFG 8192
for rep in 1 2; do p "plain $rep" $CFG 8192; done
timeout 150 python3 docs/tools/device/chunk_timing.py $CFG --tokens 8192 --runs 3 > "$OUT/chunk-timing-gemma4b.jsonl" \
  2>> "$OUT/$NAME.log"
echo "chunks rc $? $(date +%T)"
ls -la $OUT
