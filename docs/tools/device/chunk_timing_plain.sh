#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): chunk_timing.py --sync as device_time_trace.sh ran it, but
# without the CUPTI library, for SmolLM2-1.7B and Gemma-3-1B at 8,192 tokens: does tracing change a chunk's peak?
# (SmolLM2's third chunk peaks 1.3 GB higher in mlx-lm's loop than it did traced.) Writes $OUT/chunk-timing-plain.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
for c in docs/tools/device/heldout8/smollm2-1.7b.json gemma-3-1b-it qwen3-0.6b; do
  timeout 120 python3 docs/tools/device/chunk_timing.py "$c" --tokens 8192 --sync --runs 2 >> $OUT/chunk-timing-plain.jsonl
  echo "$c rc $?"
done
