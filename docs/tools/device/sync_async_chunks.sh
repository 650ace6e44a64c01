#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): does a prompt chunk's peak depend on how its eval is called?
# generate_step ends each chunk with mx.eval; chunk_timing.py (the "cold chunks" study) with mx.async_eval and
# mx.synchronize(). Mistral-7B 6-bit's second chunk peaked 3.25 GB above its start in mlx-lm's loop and 7.86 in
# chunk_timing.py. Each config in a process of its own, --sync and not, on one machine. Writes $OUT/sync-async.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
start=$(date +%s); deadline=${DEADLINE_S:-300}
nvidia-smi -L | tee $OUT/device.txt
H=docs/tools/device/heldout11; G=docs/tools/device/heldout9/gemma-3-4b-it.json
run() {  # SECONDS CONFIG TOKENS RUNS [--sync]
  local left=$(( deadline - ($(date +%s) - start) )); local t=$(( left < $1 ? left : $1 ))
  if [ "$t" -lt 20 ]; then echo "$2 skipped: ${left}s left"; return; fi
  timeout "$t" python3 docs/tools/device/chunk_timing.py "$2" --tokens "$3" --step 2048 --runs "$4" $5 \
    >> $OUT/sync-async.jsonl 2>> $OUT/sync-async.err
  echo "$2 $3 $5 rc $? $(date +%T)"
}
run 80 $H/mistral-7b-instruct-v0.3-6bit.json 4096 3 --sync
run 40 $H/mistral-7b-instruct-v0.3-6bit.json 4096 3
run 50 $G 8192 2 --sync
run 50 $G 8192 2
python3 - <<'PY'
import json, os
for line in open(os.path.join(os.environ["OUT"], "sync-async.jsonl")):
    r = json.loads(line)
    if "run" in r:
        print(r["name"][-28:], r["eval"], r["run"], r["offset"], f"{r['peak_above_bytes'] / 1e9:.2f} GB", f"encode {r['encode_s'] * 1e3:.0f} wall {r['wall_s'] * 1e3:.0f} ms")
PY
