#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a twenty-fourth held-out set, predicted before it is measured
# (predictions/heldout24.jsonl under the shipped profile, candidate D; predictions/heldout24-e.jsonl under candidate E,
# D with each command buffer's nodes as MLX's encoder makes them: docs/tools/timing_study/predict_e.py). Prompts new to
# the stored runs, mostly of models whose attention MLX runs unfused over grouped queries (Gemma 2 and 3, gpt-oss), where
# the two differ. First, pythia-160m's 1K prompt in three fresh processes one after another (`repeat13`): the stored
# two, out of their ranges, each built the model's kernels in its first eval (12-17 s); the later two find them built.
# Each generation in a process of its own, each phase's peak recorded. Writes $OUT/heldout24.tgz.
DEADLINE_S=${DEADLINE_S:-560}; GEN=gen24; source docs/tools/device/heldout_measure.sh || exit 3
H8=docs/tools/device/heldout8; H9=docs/tools/device/heldout9; H11=docs/tools/device/heldout11
for i in 1 2 3; do GEN=rep13 SPLIT=repeat m 40 pythia-160m 1024:2048:32; done
m 70 $H9/gemma-3-4b-it.json 6144:2048:16
m 90 gpt-oss-20b 4096:2048:16
m 50 gemma-2-2b-it 6144:2048:16
m 70 $H11/gemma-3-1b-it-4bit.json 8192:2048:16
m 80 $H9/gemma-3-4b-it.json 12288:2048:16
m 50 gemma-3-1b-it 10240:2048:16
m 40 pythia-160m 2048:2048:16
m 50 $H8/qwen3-1.7b.json 10240:2048:16
cd $OUT && tar czf heldout24.tgz gen24 gen24-*.log rep13 rep13-*.log && rm -rf gen24 gen24-*.log rep13 rep13-*.log; ls -la $OUT
