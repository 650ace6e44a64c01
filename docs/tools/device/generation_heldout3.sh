#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the kernel rates of a prefill chunk
# (kernel_rates.py), then a third held-out set of full-size generations on architectures no CUDA run had
# measured, kept unread until the model they test is settled (docs/generation.md). Each run's log goes to a
# file, not to the call's output. Writes $OUT/kernel_rates.json and $OUT/heldout3.tgz (gen3/heldout.jsonl).
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device(), mx.device_info().get('device_name'))" | tee -a $OUT/device.txt
timeout 90 python3 docs/tools/device/kernel_rates.py 2>&1 | tail -30
m() { timeout "$1" python3 docs/tools/generation_runs.py measure --split heldout --configs "$2" --full-size --workloads 1024:2048:32,8192:2048:16 --out $OUT/gen3 > "$OUT/gen3-$2.log" 2>&1; echo "$2 rc $? $(date +%T)"; }
m 90 gemma-2-2b-it
m 100 qwen2.5-7b-instruct
m 100 mistral-7b-instruct-v0.3-8bit
m 170 qwen3-30b-a3b
cd $OUT && tar czf heldout3.tgz gen3 gen3-*.log && rm -rf gen3 gen3-*.log; ls -la $OUT
