#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the quantized class of issue #16 on CUDA (5 runs each),
# and full-size random-weight mlx-lm generations (docs/tools/generation_runs.py) on the H200. Writes to $OUT.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device(), mx.device_info().get('device_name'))" | tee -a $OUT/device.txt
timeout 150 python3 -c "
import json
from kvsim.scenario.parse import parse_scenario
from kvsim.calibration.measure import run_reference
for s in json.load(open('docs/tools/device/quantized-class.json')):
    for r in range(5):
        m = run_reference(parse_scenario(s, 'mlx-cuda'))
        print(json.dumps({'id': s['id'], 'repeat': r, 'mlx': m.mlx_version, 'peak_bytes': max(x.peak_bytes for x in m.steps), 'final_active_bytes': m.steps[-1].active_bytes}), flush=True)
" > $OUT/quantized-class-cuda.jsonl 2> $OUT/quantized.err; echo quant rc $?; wc -l $OUT/quantized-class-cuda.jsonl
for c in llama-3.1-8b-instruct:validation qwen3-30b-a3b-4bit:validation gemma-3-1b-it:train mistral-7b-instruct-v0.3:train deepseek-v2-lite-chat:heldout qwen3-8b:heldout lfm2-1.2b:heldout phi-3-mini-4k-instruct:train; do
  n=${c%%:*}; s=${c##*:}
  timeout 90 python3 docs/tools/generation_runs.py measure --split $s --configs $n --full-size --workloads 1024:2048:32,8192:2048:16 --out $OUT/gen 2>&1 | tail -3
done
ls -la $OUT $OUT/gen
