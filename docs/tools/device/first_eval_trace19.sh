#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): CUPTI traces of the first evals of four of the nineteenth
# held-out set's configs, two dense and two quantized, to see which instantiations return with a graph still running
# (docs/generation.md, "CUDA: first-eval instantiations that leave the newest graph running"). Each config's kernels
# are built by an untraced process first. Writes $OUT/first-eval-trace.tar.xz (first_eval_trace.sh).
H8=docs/tools/device/heldout8; H9=docs/tools/device/heldout9; H11=docs/tools/device/heldout11; P=kvsim/data/configs/public
RUNS="60:b-qwen17:$H8/qwen3-1.7b.json:2048 50:qwen17:$H8/qwen3-1.7b.json:2048:trace
50:b-qwen25:$H9/qwen2.5-3b-instruct.json:2048 50:qwen25:$H9/qwen2.5-3b-instruct.json:2048:trace
110:b-qwen46:$P/qwen3-4b-6bit.json:2048 50:qwen46:$P/qwen3-4b-6bit.json:2048:trace
110:b-phi8:$H11/phi-3-mini-4k-instruct-8bit.json:2048 50:phi8:$H11/phi-3-mini-4k-instruct-8bit.json:2048:trace" \
  DEADLINE_S=${DEADLINE_S:-560} bash docs/tools/device/first_eval_trace.sh
