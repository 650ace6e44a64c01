#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): gpt-oss-20b's lone 2,000-token prompt peaked 15.1 GB above
# its weights, above kvsim's latest-free play (11.7 GB). How does that first eval's peak grow with the model's layers
# (half of them sliding-window attention, whose attention with sinks runs unfused on CUDA)? graph_commits.py, no dot
# files: the first 2, 4, 8, 16 and 24 layers at full width, then all 24 with CUDA graphs off, each in a process of
# its own. Writes $OUT/gptoss-layers.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
cut() {  # cut LAYERS: the config with its first LAYERS layers, written to /tmp/gptoss-LAYERS.json
  python3 -c "
import json, sys
from kvsim.generation.config import load_model_config
c = dict(load_model_config('gpt-oss-20b').config); n = int(sys.argv[1])
c['num_hidden_layers'] = n; c['layer_types'] = c['layer_types'][:n]
json.dump(c, open(f'/tmp/gptoss-{n}.json', 'w'))" "$1"
}
g() {  # g ENV LAYERS
  cut "$2"
  env $1 MLX_SAVE_CUDA_GRAPHS_DOT_FILE= timeout 150 python3 docs/tools/device/graph_commits.py /tmp/gptoss-$2.json \
    --prompt 2000 >> $OUT/gptoss-layers.jsonl 2>> $OUT/gptoss-layers.log
  echo "$1 $2 rc $? $(date +%T)"
}
for n in 2 4 8 16 24; do g KVSIM_PLAIN=1 $n; done
g MLX_USE_CUDA_GRAPHS=0 24
ls -la $OUT
