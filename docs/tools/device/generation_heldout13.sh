#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a thirteenth held-out set, predicted with the task
# throttle's first-eval rule (predictions/heldout13.jsonl, committed before this call): first evals whose plays
# kvsim finds bound by MLX's ten tasks in flight at every host pace (gpt-oss-20b at 2,048 and 3,000 tokens,
# gpt-oss-120b at 1K and 2K, Mixtral-8x7B at 2K), and gpt-oss-20b at 1,536 and 1,792, just short of that bound,
# each generation in a process of its own, its first eval the peak.
# PART=1: gpt-oss-20b; PART=2 (a later call on the same machine): gpt-oss-120b (docs/tools/device/heldout13/) and
# Mixtral. Writes $OUT/heldout13-$PART.tgz.
DEADLINE_S=${DEADLINE_S:-560}; GEN=gen13-${PART:?PART=1 or 2}; source docs/tools/device/heldout_measure.sh || exit 3
if [ "$PART" = 1 ]; then
  for w in 2048:2048:32 3000:2048:32 1792:2048:32 1536:2048:32; do m 130 gpt-oss-20b $w; done
else
  for w in 1024:2048:32 2048:2048:32; do m 200 docs/tools/device/heldout13/gpt-oss-120b.json $w; done
  m 170 mixtral-8x7b-instruct-v0.1 2048:2048:32
fi
cd $OUT && tar czf heldout13-$PART.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
