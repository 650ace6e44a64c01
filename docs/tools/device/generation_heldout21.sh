#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a twenty-first held-out set, predicted before it is measured
# (predictions/heldout21.jsonl, under the shipped profile, whose later prompt chunks play warm;
# predictions/heldout21-generation.jsonl: one graph cache for the whole generation, model_graph_cache_scope
# "generation", and the host's allocations at 200 GB/s, host_malloc_bytes_per_s 2e11: the candidate chosen after the
# twentieth set and the stored runs). Prompts of two and three 2,048-token chunks. Each generation in a process of its own. Writes $OUT/heldout21.tgz.
DEADLINE_S=${DEADLINE_S:-540}; GEN=gen21; source docs/tools/device/heldout_measure.sh || exit 3
H9=docs/tools/device/heldout9; H11=docs/tools/device/heldout11; P=kvsim/data/configs/public
m 110 $P/qwen3-4b-6bit.json 6144:2048:16
m 90 $P/llama-3.2-3b-4bit.json 4096:2048:16
m 90 $P/mistral-7b-instruct-v0.3-4bit.json 6144:2048:16
m 90 $P/qwen2.5-7b-4bit.json 4096:2048:16
m 40 gemma-3-1b-it 6144:2048:16
m 40 docs/tools/device/heldout8/qwen3-1.7b.json 4096:2048:16
m 40 llama-3.2-1b-instruct 4096:2048:16
m 50 phi-3-mini-4k-instruct 4096:2048:16
m 40 docs/tools/device/heldout8/smollm2-1.7b.json 6144:2048:16
cd $OUT && tar czf heldout21.tgz gen21 gen21-*.log && rm -rf gen21 gen21-*.log; ls -la $OUT
