#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): Gemma-3-4B's text model at 8K, D's one stored miss left
# besides pythia-160m, twice in processes of their own with each phase's peak (as generation_phase_peaks.sh): which
# chunk peaks, against D's deep warm play of its third. Writes $OUT/phase-peaks3.tgz.
DEADLINE_S=${DEADLINE_S:-300}; GEN=phase3; SPLIT=repeat; source docs/tools/device/heldout_measure.sh || exit 3
for i in 1 2; do m 120 docs/tools/device/heldout9/gemma-3-4b-it.json 8192:2048:16; done
cd $OUT && tar czf phase-peaks3.tgz phase3 phase3-*.log && rm -rf phase3 phase3-*.log; ls -la $OUT
