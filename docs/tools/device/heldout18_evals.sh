#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the eighteenth set's misses again, in mlx-lm's own loop.
# Mistral-7B 6-bit at 4,096 tokens in 2,048-token chunks: per-eval peaks (eval_diff.py's real_evals, a synchronize
# around every eval), because chunk_timing.py's second chunk peaked 7.86 GB above its start where the generation
# peaked 3.82 above its weights in all. Then each miss again as a whole generation in fresh processes
# (generation_runs.py measure --split repeat): Mistral twice, Phi-3-mini 8-bit and Qwen3-4B 4-bit once.
# Then MLX's own command buffers of Phi-3-mini 8-bit's 2,048-token eval and Mistral's two chunks (graph_commits.py
# with dot files): chunk_timing.py found both peaks the same to the byte cold and warm.
# Writes $OUT/evals-mistral-6bit-4096.json, $OUT/rep18/repeat.jsonl and $OUT/graph-commits-heldout18.jsonl.
DEADLINE_S=${DEADLINE_S:-400}; GEN=rep18; SPLIT=repeat; source docs/tools/device/heldout_measure.sh || exit 3
H=docs/tools/device/heldout11; P=kvsim/data/configs/public
timeout 120 python3 -c "
import json, sys
sys.path.insert(0, 'docs/tools')
from eval_diff import real_evals
from kvsim.generation.config import load_model_config
name = '$H/mistral-7b-instruct-v0.3-6bit.json'
rows, overall = real_evals(name, load_model_config(name).config, 4096, 2048, 16)
json.dump({'name': name, 'prompt_tokens': 4096, 'step': 2048, 'max_tokens': 16, 'overall': overall, 'rows': rows},
          open('$OUT/evals-mistral-6bit-4096.json', 'w'))
print('evals overall', overall); [print(r) for r in rows[:6]]
" 2>&1 | tail -8
m 60 $H/mistral-7b-instruct-v0.3-6bit.json 4096:2048:16
m 60 $H/mistral-7b-instruct-v0.3-6bit.json 4096:2048:16
m 60 $H/phi-3-mini-4k-instruct-8bit.json 2048:2048:16
m 60 $P/qwen3-4b-4bit.json 3072:3072:16
g() {  # TAG CONFIG PROMPT: graph_commits_run.sh's g (not sourced here: it would rewrite $OUT/device.txt)
  MLX_SAVE_CUDA_GRAPHS_DOT_FILE=/tmp/dots-$1/g timeout 150 python3 docs/tools/device/graph_commits.py "$2" \
    --prompt "$3" --keep-evals 4 >> "$OUT/graph-commits-heldout18.jsonl" 2>> "$OUT/graph-commits-heldout18.log"
  echo "$1 rc $? $(date +%T)"
}
g phi3-8bit-2k $H/phi-3-mini-4k-instruct-8bit.json 2048
g mistral-6bit-4k $H/mistral-7b-instruct-v0.3-6bit.json 4096
