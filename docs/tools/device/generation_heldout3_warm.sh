#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the third held-out set's 1K and 8K runs measured again
# after a warm-up, so MLX's kernel cache holds their kernels as it does for any run after a model's first
# on a machine (docs/generation.md). Per config: one 1K generation in a process of its own (discarded),
# then the stored workloads in a second process. Writes $OUT/heldout3-warm.tgz (gen3w/repeat.jsonl, logs).
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
m() { timeout "$1" python3 docs/tools/generation_runs.py measure --split repeat --configs "$2" --full-size --workloads "$3" --out "$4" > "$OUT/gen3w-$2-$(basename $4).log" 2>&1; echo "$2 $(basename $4) rc $? $(date +%T)"; }
for c in gemma-2-2b-it mistral-7b-instruct-v0.3-8bit qwen2.5-7b-instruct; do
  m 100 $c 1024:2048:2 /tmp/warmup
  m 100 $c 1024:2048:32,8192:2048:16 $OUT/gen3w
done
cd $OUT && tar czf heldout3-warm.tgz gen3w gen3w-*.log && rm -rf gen3w gen3w-*.log; ls -la $OUT
