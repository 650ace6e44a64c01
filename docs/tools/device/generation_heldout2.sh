#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): new held-out full-size generations on the H200, measured
# after the CPU model's op-for-op fix (b7a6ea1), and per-eval peaks of two runs (docs/tools/eval_diff.py's
# real_evals, synchronised around each eval). Writes $OUT/gen/heldout.jsonl and $OUT/evals-*.json.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device(), mx.device_info().get('device_name'))" | tee -a $OUT/device.txt
m() { timeout "$1" python3 docs/tools/generation_runs.py measure --split heldout --configs "$2" --full-size --workloads "$3" --out $OUT/gen 2>&1 | tail -2; echo "$2 rc $?"; }
m 200 qwen3-30b-a3b-4bit 1024:2048:32,8192:2048:16
m 120 docs/tools/device/qwen3-next-80b-a3b-8layers.json 1024:2048:32,8192:2048:16
m 90 llama-3.1-8b-instruct 32768:2048:16
for p in 1024 8192; do
  timeout 60 python3 -c "
import json, sys
sys.path.insert(0, 'docs/tools')
from eval_diff import real_evals
from kvsim.generation.config import load_model_config
rows, overall = real_evals('llama-3.1-8b-instruct', load_model_config('llama-3.1-8b-instruct').config, $p, 2048, 8)
json.dump({'name': 'llama-3.1-8b-instruct', 'prompt_tokens': $p, 'step': 2048, 'max_tokens': 8, 'overall': overall, 'rows': rows}, open('$OUT/evals-llama-$p.json', 'w'))
print('evals', $p, overall, len(rows))
" 2>&1 | tail -2
done
m 120 gpt-oss-20b 1024:2048:32,8192:2048:16
ls -la $OUT $OUT/gen
