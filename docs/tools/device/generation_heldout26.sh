#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a twenty-sixth held-out set, predicted before it is measured
# under the shipped profile (candidate E, predictions/heldout26.jsonl) and with a process's first eval on the later
# host's costs per op class (model_first_eval_later_host, heldout26-f.jsonl). One-chunk prompts, each its process's
# first eval, of small dense models and a quantized one, new to the stored runs. Writes $OUT/heldout26.tgz.
DEADLINE_S=${DEADLINE_S:-520}; GEN=gen26; source docs/tools/device/heldout_measure.sh || exit 3
m 40 pythia-160m 1536:2048:32
m 40 qwen3-0.6b 2048:2048:32
m 45 llama-3.2-1b-instruct 2048:2048:32
m 40 qwen2.5-0.5b-instruct 2048:2048:32
m 45 stablelm-2-1_6b 2048:2048:32
m 45 olmo-2-0425-1b 2048:2048:32
m 70 docs/tools/device/heldout11/llama-3.2-3b-6bit.json 2048:2048:32
m 50 granite-3.0-2b-instruct 2048:2048:32
cd $OUT && tar czf heldout26.tgz gen26 gen26-*.log && rm -rf gen26 gen26-*.log; ls -la $OUT
