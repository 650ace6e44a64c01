#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): run-to-run spread of the thirteenth set's gpt-oss-20b, in
# fresh processes: 1,792 tokens (the set's miss, -23.2%) and 1,536 (inside by 0.6%) three times each, 2,048 (a first
# eval the task throttle bounds) twice, and 1,280 (below the set) twice. Writes $OUT/repeats8.tgz (rep8/repeat.jsonl, logs).
GEN=rep8; source docs/tools/device/heldout_measure.sh || exit 3
r() {  # r CONFIG INDEX WORKLOADS: one process, split "repeat"
  timeout 120 python3 docs/tools/generation_runs.py measure --split repeat --configs "$1" --full-size \
    --workloads "$3" --out "$OUT/$GEN" > "$OUT/$GEN-$(basename "$1" .json)-$3-$2.log" 2>&1
  echo "$1 $3 $2 rc $? $(date +%T)"
}
for i in 1 2 3; do r gpt-oss-20b $i 1792:2048:32; r gpt-oss-20b $i 1536:2048:32; done
for i in 1 2; do r gpt-oss-20b $i 2048:2048:32; r gpt-oss-20b $i 1280:2048:32; done
cd $OUT && tar czf repeats8.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
