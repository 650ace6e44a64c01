#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): what each op of gpt-oss-20b's prefill allocates on CUDA,
# evaluated alone (docs/tools/device/op_bytes_cuda.py), its first two layers (one sliding, one full) at full width,
# prompts of 1,024 and 2,000 tokens. Writes $OUT/op-bytes-gpt-oss.jsonl.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
timeout 400 python3 docs/tools/device/op_bytes_cuda.py gpt-oss-20b --layers 2 --tokens 1024,2000 \
  > $OUT/op-bytes-gpt-oss.jsonl 2> $OUT/op-bytes-gpt-oss.log; echo "rc $?"
tail -3 $OUT/op-bytes-gpt-oss.log; ls -la $OUT
