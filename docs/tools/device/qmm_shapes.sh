#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): 4-bit matmul rates at Phi-3-mini's and Llama-3.1-8B's
# shapes, 2,048 rows and the 2,047 of an 8K prompt's last chunk (kernel_rates.py qmm_shapes). Writes
# $OUT/kernel_rates.json.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
CASES=qmm_shapes:2048,qmm_shapes:2047,qmm_shapes:1024,qmm_shapes:1023 timeout 300 python3 docs/tools/device/kernel_rates.py
