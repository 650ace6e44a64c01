#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): run-to-run spread of the three CUDA runs still outside
# their ranges once kvsim fuses compiled functions (docs/generation.md, "CUDA: fused compiled functions"):
# olmo-2-0425-1b and llama-3.2-1b-instruct-4bit at 1K (3 fresh processes each, 1K then 8K, as stored) and
# llama-3.1-8b-instruct at 32K alone (2 processes, as heldout2 took it). Writes $OUT/repeats3.tgz
# (rep3/repeat.jsonl, logs).
GEN=rep3; source docs/tools/device/heldout_measure.sh || exit 3
r() {  # r CONFIG INDEX WORKLOADS: one process, split "repeat"
  timeout 150 python3 docs/tools/generation_runs.py measure --split repeat --configs "$1" --full-size \
    --workloads "$3" --out "$OUT/$GEN" > "$OUT/$GEN-$1-$2.log" 2>&1
  echo "$1 $2 rc $? $(date +%T)"
}
for i in 1 2 3; do
  r olmo-2-0425-1b $i 1024:2048:32,8192:2048:16
  r llama-3.2-1b-instruct-4bit $i 1024:2048:32,8192:2048:16
done
for i in 1 2; do r llama-3.1-8b-instruct $i 32768:2048:16; done
cd $OUT && tar czf repeats3.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
