#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): run-to-run spread of the twelfth set's closest calls, in
# fresh processes: the 4-bit Llama-3.2-1B at 1,536 tokens (1.930 GB against a range top of 1.937) three times, and the
# 5-bit one at 1K (-10.8%) twice. Writes $OUT/repeats7.tgz (rep7/repeat.jsonl, logs).
GEN=rep7; source docs/tools/device/heldout_measure.sh || exit 3
r() {  # r CONFIG INDEX WORKLOADS: one process, split "repeat"
  timeout 120 python3 docs/tools/generation_runs.py measure --split repeat --configs "$1" --full-size \
    --workloads "$3" --out "$OUT/$GEN" > "$OUT/$GEN-$(basename "$1" .json)-$2.log" 2>&1
  echo "$1 $2 rc $? $(date +%T)"
}
for i in 1 2 3; do r llama-3.2-1b-instruct-4bit $i 1536:2048:32; done
for i in 1 2; do r docs/tools/device/heldout12/llama-3.2-1b-instruct-5bit.json $i 1024:2048:32; done
cd $OUT && tar czf repeats7.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
