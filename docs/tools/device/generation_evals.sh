#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): per-eval peaks of full-size generations
# (docs/tools/eval_diff.py's real_evals: mx.synchronize() around every eval), for the CUDA commit-size question
# of docs/generation.md. Writes $OUT/evals-<config>-<prompt>.json.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device())" | tee -a $OUT/device.txt
for name in qwen3-8b qwen3-30b-a3b-4bit gpt-oss-20b mistral-7b-instruct-v0.3 phi-3-mini-4k-instruct gemma-3-1b-it; do
  for p in 1024 8192; do
    timeout 90 python3 -c "
import json, sys
sys.path.insert(0, 'docs/tools')
from eval_diff import real_evals
from kvsim.generation.config import load_model_config
rows, overall = real_evals('$name', load_model_config('$name').config, $p, 2048, 8)
json.dump({'name': '$name', 'prompt_tokens': $p, 'step': 2048, 'max_tokens': 8, 'overall': overall, 'rows': rows}, open('$OUT/evals-$name-$p.json', 'w'))
print('evals', '$name', $p, overall, len(rows))
" 2>&1 | tail -1
  done
done
ls $OUT
