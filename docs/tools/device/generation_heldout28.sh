#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): pythia-160m's one-chunk 2K prompt, the run the range before
# the centred one missed, in three fresh processes (repeat14), then a twenty-eighth held-out set predicted before it
# is measured under the shipped profile (first evals' ranges centred, predictions/heldout28.jsonl) and with 0.375 of
# the range below the point (heldout28-e.jsonl): eight one-chunk prompts, each its process's first eval, of models
# no first eval of that length was measured for. Writes $OUT/heldout28.tgz.
DEADLINE_S=${DEADLINE_S:-540}; source docs/tools/device/heldout_measure.sh || exit 3
for i in 1 2 3; do GEN=rep14 SPLIT=repeat m 30 pythia-160m 2048:2048:16; done
GEN=gen28
m 40 gpt2 2048:2048:32
m 45 olmo-2-0425-1b 1536:2048:32
m 50 granite-3.0-2b-instruct 1536:2048:32
m 55 starcoder2-3b 1536:2048:32
m 55 smollm3-3b 1536:2048:32
m 60 qwen3-8b 1536:2048:32
m 60 mistral-7b-instruct-v0.3 1536:2048:32
m 60 internlm2_5-7b-chat 1536:2048:32
cd $OUT && tar czf heldout28.tgz gen28 rep14 gen28-*.log rep14-*.log && rm -rf gen28 rep14 gen28-*.log rep14-*.log; ls -la $OUT
