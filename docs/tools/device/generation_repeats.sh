#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the same full-size generations measured again, each
# in a fresh process with the same seed, to read how far a CUDA peak moves between identical runs (issue #17's
# point target). Writes $OUT/gen/repeat.jsonl (split "repeat").
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device())" | tee -a $OUT/device.txt
m() { timeout "$1" python3 docs/tools/generation_runs.py measure --split repeat --configs "$2" --full-size --workloads "$3" --out $OUT/gen 2>&1 | tail -3; echo "$2 rc $?"; }
for i in 1 2 3; do
  m 150 llama-3.1-8b-instruct 1024:2048:32,8192:2048:16
done
m 150 mistral-7b-instruct-v0.3 8192:2048:16,8192:2048:16
ls -la $OUT/gen
