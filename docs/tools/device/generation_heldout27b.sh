#!/usr/bin/env bash
# Device call 3, on the machine generation_heldout27.sh left warm: its last run (Qwen3-30B-A3B 4-bit, whose random
# weights took longer than the 80 s given there) again, alone. Writes $OUT/heldout27b.tgz.
DEADLINE_S=300; GEN=gen27b; source docs/tools/device/heldout_measure.sh || exit 3
m 280 qwen3-30b-a3b-4bit 1280:2048:32
cd $OUT && tar czf heldout27b.tgz gen27b gen27b-*.log; tail -5 gen27b-*.log
