#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): loop_bisect.py's variants on Mistral-7B 6-bit at 4,096 tokens
# in 2,048-token chunks, each in a process of its own (the first builds the 6-bit kernels). Writes $OUT/loop-bisect.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
start=$(date +%s); deadline=${DEADLINE_S:-200}
nvidia-smi -L | tee $OUT/device.txt
M=docs/tools/device/heldout11/mistral-7b-instruct-v0.3-6bit.json
for v in ${VARIANTS:-generate timing flat nosync generate timing}; do
  left=$(( deadline - ($(date +%s) - start) )); [ "$left" -lt 15 ] && { echo "$v skipped"; continue; }
  timeout "$left" python3 docs/tools/device/loop_bisect.py $M --variant $v >> $OUT/loop-bisect.jsonl 2>> $OUT/loop-bisect.err
  echo "$v rc $? $(date +%T)"
done
python3 -c "
import json, os
for l in open(os.environ['OUT'] + '/loop-bisect.jsonl'):
    r = json.loads(l); print(r['variant'], r['chunk'], round(r['peak_above_bytes'] / 1e9, 3), round(r['held_bytes'] / 1e9, 3))
"
