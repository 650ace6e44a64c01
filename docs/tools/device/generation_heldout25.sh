#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a twenty-fifth held-out set, predicted before it is measured
# under the shipped profile, candidate E with a partial RoPE's copies (predictions/heldout25.jsonl), and under candidate
# D (heldout25-d.jsonl, docs/tools/timing_study/predict_d.py). Prompts new to the stored runs: grouped-query attention
# MLX runs unfused (Gemma 2 and 3, gpt-oss), a one-chunk quantized first eval, pythia-160m in two chunks, and two more
# partial-RoPE models whose projections are separate (StableLM-2, phi-2). Each generation in a process of its own,
# each phase's peak recorded. Writes $OUT/heldout25.tgz.
DEADLINE_S=${DEADLINE_S:-520}; GEN=gen25; source docs/tools/device/heldout_measure.sh || exit 3
H9=docs/tools/device/heldout9; H11=docs/tools/device/heldout11
m 70 $H9/gemma-3-4b-it.json 10240:2048:16
m 90 gpt-oss-20b 6144:2048:16
m 60 gemma-2-2b-it 10240:2048:16
m 70 $H11/gemma-3-1b-it-4bit.json 2048:2048:16
m 40 pythia-160m 4096:2048:16
m 40 qwen3-0.6b 4096:2048:16
m 50 stablelm-2-1_6b 4096:2048:16
m 60 phi-2 4096:2048:16
cd $OUT && tar czf heldout25.tgz gen25 gen25-*.log && rm -rf gen25 gen25-*.log; ls -la $OUT
