#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the tenth held-out set's runs the first call's time limits
# cut (generation_heldout10.sh: the 4-bit models' first generations took 44-77 s building quantized kernels), with
# the predictions committed before either call (predictions/heldout10.jsonl): the public 4-bit Llama-3.1-8B and
# Qwen3-30B-A3B at 1K, 16K and 32K, each in a process of its own, its 1K run first. Then Gemma-3-4B's text model
# (the ninth set's miss at 8K, +21%) three more times in fresh processes, 1K then 8K. Writes $OUT/heldout10b.tgz
# (gen10b/heldout.jsonl, rep5/heldout.jsonl).
DEADLINE_S=${DEADLINE_S:-560}; GEN=gen10b; source docs/tools/device/heldout_measure.sh || exit 3
W=1024:2048:32,16384:2048:16,32768:2048:16
m 170 kvsim/data/configs/public/llama-3.1-8b-4bit.json $W
m 220 kvsim/data/configs/public/qwen3-30b-a3b-4bit.json $W
GEN=rep5
for i in 1 2 3; do m 45 docs/tools/device/heldout9/gemma-3-4b-it.json; done
cd $OUT && tar czf heldout10b.tgz gen10b rep5 gen10b-*.log rep5-*.log && rm -rf gen10b rep5 gen10b-*.log rep5-*.log; ls -la $OUT
