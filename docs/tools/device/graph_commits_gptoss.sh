#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): where MLX cuts gpt-oss-20b's lone 2,000-token prompt into
# command buffers (CUDA graphs dumped, the first eval's kernels kept), its first 8 layers at full width
# (docs/tools/device/gpt-oss-20b-8layers.json), then the same without dot files. Writes $OUT/graph-commits-gptoss.jsonl.xz.
NAME=graph-commits-gptoss; source docs/tools/device/graph_commits_run.sh || exit 3
g gptoss8 docs/tools/device/gpt-oss-20b-8layers.json 2000
p gptoss8 docs/tools/device/gpt-oss-20b-8layers.json 2000
xz -9 $OUT/$NAME.jsonl; ls -la $OUT
