#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the eighteenth held-out set's three misses, cold and warm.
# First the affine matmul rates at 8, 6 and 4 bits on Phi-3-mini's shapes (kvsim times every quantized matmul at one
# rate; kernel_rates.py qmm8_shapes, qmm6_shapes, qmm_shapes), which also builds the kernels; then chunk_timing.py
# --runs 3 on each miss, each in a process of its own: pass 0 is the process's first eval (cold), passes 1-2 warm.
# Phi-3-mini 8-bit twice, to see two cold processes. Writes $OUT/kernel_rates.json and $OUT/cold-warm.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
start=$(date +%s); deadline=${DEADLINE_S:-540}
nvidia-smi -L | tee $OUT/device.txt
H=docs/tools/device/heldout11; P=kvsim/data/configs/public
CASES=qmm8_shapes:2048,qmm6_shapes:2048,qmm_shapes:2048 timeout 240 python3 docs/tools/device/kernel_rates.py \
  > $OUT/kernel_rates.log 2>&1; echo "kernel_rates rc $? $(date +%T)"; tail -16 $OUT/kernel_rates.log
run() {  # SECONDS CONFIG TOKENS STEP
  local left=$(( deadline - ($(date +%s) - start) )); local t=$(( left < $1 ? left : $1 ))
  if [ "$t" -lt 30 ]; then echo "$2 skipped: ${left}s left"; return; fi
  timeout "$t" python3 docs/tools/device/chunk_timing.py "$2" --tokens "$3" --step "$4" --runs 3 \
    >> $OUT/cold-warm.jsonl 2>> $OUT/cold-warm.err
  echo "$2 $3 rc $? $(date +%T)"
}
run 90 $H/phi-3-mini-4k-instruct-8bit.json 2048 2048
run 90 $H/phi-3-mini-4k-instruct-8bit.json 2048 2048
run 90 $P/qwen3-4b-4bit.json 3072 3072
run 90 $H/mistral-7b-instruct-v0.3-6bit.json 4096 2048
python3 - <<'PY'
import json, os
for line in open(os.path.join(os.environ["OUT"], "cold-warm.jsonl")):
    r = json.loads(line)
    if "run" in r:
        print(r["name"][-34:], r["run"], r["offset"], f"{r['peak_above_bytes'] / 1e9:.2f} GB", f"encode {r['encode_s'] * 1e3:.0f} wall {r['wall_s'] * 1e3:.0f} ms")
PY
