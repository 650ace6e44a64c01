#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): pythia-160m's one-chunk 2K prompt in three more fresh
# processes (repeat15; the first on a fresh machine builds its kernels, as repeat14's first, the one run its range
# missed), then a twenty-ninth held-out set predicted before it was measured, with a biased linear's arithmetic
# counted over its input's last dimension (predictions/heldout29.jsonl) and, as before, over its bias's
# (heldout29-before.jsonl): models whose linears carry biases (pythia-160m, phi-2, StarCoder2-3B) and a short
# convolution (LFM2-1.2B). Writes $OUT/heldout29.tgz.
DEADLINE_S=${DEADLINE_S:-540}; source docs/tools/device/heldout_measure.sh || exit 3
for i in 1 2 3; do GEN=rep15 SPLIT=repeat m 30 pythia-160m 2048:2048:16; done
GEN=gen29
m 30 pythia-160m 1664:2048:32
m 30 pythia-160m 2560:4096:32
m 30 pythia-160m 3072:4096:32
m 40 pythia-160m 6144:2048:16
m 50 phi-2 1536:2048:32
m 50 phi-2 2560:4096:32
m 55 starcoder2-3b 2048:2048:32
m 50 lfm2-1.2b 6144:2048:16
cd $OUT && tar czf heldout29.tgz gen29 rep15 gen29-*.log rep15-*.log && rm -rf gen29 rep15 gen29-*.log rep15-*.log; ls -la $OUT
