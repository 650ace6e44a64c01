#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): a fourth held-out set of full-size generations on
# architectures no CUDA run had measured, taken after the first-eval point (first_eval_point_share) was
# settled and its predictions committed (data/generation/mlx-cuda-0.32.4/predictions/heldout4.jsonl). Each config
# in a process of its own, its 1K run first (the process's first eval), as every stored CUDA run was taken.
# Configs run in order until DEADLINE_S (default 540) is spent. Writes $OUT/heldout4.tgz (gen4/heldout.jsonl, logs).
GEN=gen4; source docs/tools/device/heldout_measure.sh || exit 3
m 100 internlm2_5-7b-chat
m 80 smollm3-3b
m 80 granite-3.0-2b-instruct
m 80 starcoder2-3b
m 70 olmo-2-0425-1b
m 70 llama-3.2-1b-instruct-4bit
m 70 phi-2
m 170 mixtral-8x7b-instruct-v0.1
cd $OUT && tar czf heldout4.tgz gen4 gen4-*.log && rm -rf gen4 gen4-*.log; ls -la $OUT
