#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a twenty-seventh held-out set, predicted before it is
# measured under the shipped profile, whose first evals' ranges are centred on their points
# (model_first_eval_low_share 0.5, predictions/heldout27.jsonl), and under the range before (0.375 below the point,
# heldout27-e.jsonl). One-chunk prompts, each its process's first eval, new to the stored runs: models whose first
# evals have landed near their ranges' low ends (pythia-160m, Qwen3-30B-A3B 4-bit) and near their high ends
# (StableLM-2, Llama-3.2-1B, Qwen2.5-0.5B), and three architectures more. Writes $OUT/heldout27.tgz.
DEADLINE_S=${DEADLINE_S:-520}; GEN=gen27; source docs/tools/device/heldout_measure.sh || exit 3
m 40 pythia-160m 1792:2048:32
m 40 pythia-160m 1280:2048:32
m 45 stablelm-2-1_6b 1536:2048:32
m 45 llama-3.2-1b-instruct 1536:2048:32
m 40 qwen2.5-0.5b-instruct 1536:2048:32
m 45 lfm2-1.2b 2048:2048:32
m 60 phi-2 2048:2048:32
m 80 qwen3-30b-a3b-4bit 1280:2048:32
cd $OUT && tar czf heldout27.tgz gen27 gen27-*.log && rm -rf gen27 gen27-*.log; ls -la $OUT
