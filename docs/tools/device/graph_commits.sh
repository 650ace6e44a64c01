#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): MLX-CUDA's command buffers in real generations
# (docs/tools/device/graph_commits.py): each eval's committed graphs, their nodes and kernels, and its peak, for
# bf16 Llama-3.2-1B at 1K (MLX's defaults, 400 ops a buffer, no dot files, CUDA graphs off), Llama-3.1-8B at 1K,
# and qwen3-0.6b and gemma-3-1b at 8K. Writes $OUT/graph-commits.jsonl and $OUT/dots.tgz (first evals' graphs).
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
g() {  # g TAG CONFIG PROMPT [ENV...]: one process; dot files unless the ENV says MLX_SAVE_CUDA_GRAPHS_DOT_FILE=
  local tag=$1 cfg=$2 prompt=$3; shift 3
  env MLX_SAVE_CUDA_GRAPHS_DOT_FILE=/tmp/dots-$tag/g "$@" timeout 120 python3 docs/tools/device/graph_commits.py \
    "$cfg" --prompt "$prompt" --keep "$OUT/dots/$tag" >> "$OUT/graph-commits.jsonl" 2> "$OUT/$tag.log"
  echo "$tag rc $? $(date +%T)"
}
g llama1b llama-3.2-1b-instruct 1024
g llama1b-ops400 llama-3.2-1b-instruct 1024 MLX_MAX_OPS_PER_BUFFER=400
g llama1b-nodots llama-3.2-1b-instruct 1024 MLX_SAVE_CUDA_GRAPHS_DOT_FILE=
g llama1b-nographs llama-3.2-1b-instruct 1024 MLX_SAVE_CUDA_GRAPHS_DOT_FILE= MLX_USE_CUDA_GRAPHS=0
g llama8b llama-3.1-8b-instruct 1024
g qwen3-0.6b-8k qwen3-0.6b 8192
g gemma3-8k gemma-3-1b-it 8192
cd $OUT && tar czf dots.tgz dots *.log && rm -rf dots *.log; ls -la $OUT
