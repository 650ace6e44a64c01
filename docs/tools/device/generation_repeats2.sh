#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): run-to-run spread of CUDA peaks where kvsim's host and
# device balance is in question: train's gemma-3-1b (4 fresh processes) and the small bf16 models smollm3-3b and
# qwen3-0.6b (2 each), each process its 1K run first then 8K, as every stored CUDA run was taken.
# Writes $OUT/repeats2.tgz (rep2/repeat.jsonl, logs).
GEN=rep2; source docs/tools/device/heldout_measure.sh || exit 3
r() {  # r CONFIG INDEX: one process, split "repeat"
  timeout 120 python3 docs/tools/generation_runs.py measure --split repeat --configs "$1" --full-size \
    --workloads 1024:2048:32,8192:2048:16 --out "$OUT/$GEN" > "$OUT/$GEN-$1-$2.log" 2>&1
  echo "$1 $2 rc $? $(date +%T)"
}
for i in 1 2 3 4; do r gemma-3-1b-it $i; done
for i in 1 2; do r smollm3-3b $i; r qwen3-0.6b $i; done
cd $OUT && tar czf repeats2.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
