#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): pythia-160m's one-chunk prompts peak at kvsim's floor
# (1K: 0.21-0.25 GB above the weights, `repeat13`; 2K: 0.46, `heldout24`), where kvsim cuts its first eval into two
# command buffers of 101 and 94 nodes; a CUPTI trace of a 1K pass saw MLX launch three, of 77, 76 and 21 nodes
# (`first-eval-trace-2.tar.xz`). Its graphs dumped at 1K and 2K, and Gemma-2-2B's at 6K (the twenty-fourth set's model
# with grouped-query fallback attention and softcapping). Writes $OUT/graph-commits-pythia.jsonl.
NAME=graph-commits-pythia; source docs/tools/device/graph_commits_run.sh || exit 3
g pythia-1k pythia-160m 1024
g pythia-2k pythia-160m 2048
g gemma2-6k gemma-2-2b-it 6144
ls -la $OUT
