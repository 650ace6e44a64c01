#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the stored CUDA runs kvsim misses, again, each in a process
# of its own as first measured, now with each phase's peak (kvsim.generation.measure.PhasePeak: read and reset as
# generate_step reports each prompt chunk, the first token and each decode token done; no synchronize added), to see
# which phase peaks: Gemma-3-1B at 8K (train; three processes: its two modes), SmolLM2-1.7B at 6,144 (held-out set 21),
# pythia-160m at 1K (set 6), then the shipped profile's quantized misses. Writes $OUT/phase-peaks.tgz.
DEADLINE_S=${DEADLINE_S:-540}; GEN=phase; SPLIT=repeat; source docs/tools/device/heldout_measure.sh || exit 3
P=kvsim/data/configs/public; H8=docs/tools/device/heldout8; H9=docs/tools/device/heldout9
H11=docs/tools/device/heldout11
for i in 1 2 3; do m 45 gemma-3-1b-it; done
for i in 1 2; do m 45 $H8/smollm2-1.7b.json 6144:2048:16; done
m 45 pythia-160m
m 70 $H11/mistral-7b-instruct-v0.3-6bit.json 4096:2048:16
m 80 $H9/phi-3-mini-4k-instruct-4bit.json 4096:2048:16
m 70 $P/llama-3.2-3b-4bit.json 4096:2048:16
m 60 $H11/phi-3-mini-4k-instruct-8bit.json 2048:2048:16
m 60 llama-3.2-1b-instruct-4bit 1536:2048:32
cd $OUT && tar czf phase-peaks.tgz phase phase-*.log && rm -rf phase phase-*.log; ls -la $OUT
