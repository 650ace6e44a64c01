#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a twentieth held-out set, predicted before it is measured
# (predictions/heldout20.jsonl, under the shipped profile, whose later prompt chunks play warm;
# predictions/heldout20-generation.jsonl: one graph cache for the whole generation, model_graph_cache_scope
# "generation"). Prompts of two and three 2,048-token chunks, where the two differ most: the second chunk instantiates
# most of its CUDA graphs. Each generation in a process of its own. Writes $OUT/heldout20.tgz.
DEADLINE_S=${DEADLINE_S:-540}; GEN=gen20; source docs/tools/device/heldout_measure.sh || exit 3
H9=docs/tools/device/heldout9; H11=docs/tools/device/heldout11; P=kvsim/data/configs/public
m 110 $H9/phi-3-mini-4k-instruct-4bit.json 4096:2048:16
m 90 $H11/qwen3-8b-4bit.json 6144:2048:16
m 90 $P/qwen3-4b-4bit.json 4096:2048:16
m 40 gemma-3-1b-it 4096:2048:16
m 40 $P/llama-3.2-3b.json 4096:2048:16
m 70 $H11/gemma-3-1b-it-4bit.json 5120:2048:16
m 60 qwen2.5-7b-instruct 6144:2048:16
m 50 qwen3-8b 3072:2048:16
m 90 $P/llama-3.1-8b-4bit.json 4096:2048:16
cd $OUT && tar czf heldout20.tgz gen20 gen20-*.log && rm -rf gen20 gen20-*.log; ls -la $OUT
