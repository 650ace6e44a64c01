#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): CUPTI traces of five more architectures' whole prompts, for
# the device and host times of whole-model command buffers beyond the five of chunk_trace.sh (docs/generation.md,
# "CUDA: the device's and the host's times per command buffer, traced"). chunk_trace.sh's runs, two passes each
# (the second warm), no untraced kernel-building pass first: only the warm pass's times are read.
# Writes $OUT/device-time-trace.tar.xz.
P=kvsim/data/configs/public; H8=docs/tools/device/heldout8; H9=docs/tools/device/heldout9
export ARCHIVE=device-time-trace.tar.xz
export RUNS="90:gemma1b:gemma-3-1b-it:8192:2048:2:trace 90:smol17:$H8/smollm2-1.7b.json:6144:2048:2:trace
90:qwen06:qwen3-0.6b:8192:2048:2:trace 120:gemma4b:$H9/gemma-3-4b-it.json:8192:2048:2:trace
120:moe4:$P/qwen3-30b-a3b-4bit.json:4096:2048:2:trace"
exec bash docs/tools/device/chunk_trace.sh
