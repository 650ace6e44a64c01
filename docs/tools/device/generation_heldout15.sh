#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a fifteenth held-out set, predicted with a first eval nearly
# bound by MLX's task throttle (first_eval_bound_share 0.85; predictions/heldout15.jsonl, committed before this call):
# one-chunk prompts whose slowest-host play reaches 0.85-0.97 of the way from floor to fitted play (Qwen3-30B-A3B 4-bit
# at 2,560, DeepSeek-V2-Lite 4-bit at 2,816, Qwen3-30B-A3B 8-bit at 2,048, gpt-oss-20b at 1,920 and 1,664), and two
# controls just under 0.85 (DeepSeek-V2-Lite 4-bit at 2,560, Qwen3-30B-A3B 4-bit at 2,048). Each generation in a
# process of its own. Writes $OUT/heldout15.tgz.
DEADLINE_S=${DEADLINE_S:-330}; GEN=gen15; source docs/tools/device/heldout_measure.sh || exit 3
P=kvsim/data/configs/public; D=docs/tools/device/heldout12/deepseek-v2-lite-chat-4bit.json
m 150 qwen3-30b-a3b-4bit 2560:2560:16
m 90 $D 2816:2816:16
m 90 $P/qwen3-30b-a3b-8bit.json 2048:2048:16
m 60 gpt-oss-20b 1920:2048:16
m 60 gpt-oss-20b 1664:2048:16
m 90 $D 2560:2560:16
m 60 qwen3-30b-a3b-4bit 2048:2048:16
cd $OUT && tar czf heldout15.tgz $GEN $GEN-*.log && rm -rf $GEN $GEN-*.log; ls -la $OUT
