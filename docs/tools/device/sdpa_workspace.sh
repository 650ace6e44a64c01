#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): what MLX-CUDA's fused attention allocates beside its output
# (sdpa_workspace.py), then more generations with each phase's peak (as generation_phase_peaks.sh): SmolLM2-1.7B at
# 8,192, Qwen3-0.6B 4-bit at 8,192 (after its 1K run, as set 6 ran it), Gemma-3-1B at 16,384. Writes
# $OUT/sdpa-workspace.jsonl and $OUT/phase-peaks2.tgz.
DEADLINE_S=${DEADLINE_S:-400}; GEN=phase2; SPLIT=repeat; source docs/tools/device/heldout_measure.sh || exit 3
timeout 120 python3 docs/tools/device/sdpa_workspace.py > $OUT/sdpa-workspace.jsonl; echo "sdpa rc $?"
m 50 docs/tools/device/heldout8/smollm2-1.7b.json 8192:2048:16
m 50 qwen3-0.6b-4bit
m 60 kvsim/data/configs/gemma-3-1b-it.json 16384:2048:16
cd $OUT && tar czf phase-peaks2.tgz phase2 phase2-*.log && rm -rf phase2 phase2-*.log; ls -la $OUT
