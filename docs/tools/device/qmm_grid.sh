#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): quantized matmul rates over the stored quantized runs'
# layer shapes (kernel_rates.py's qmm<bits>_grid), 1,024 and 2,048 rows, 4, 8, 6 and 5 bits. Writes $OUT/kernel_rates.json.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
nvidia-smi -L | tee $OUT/device.txt
CASES=${CASES:-qmm4_grid:1024,qmm4_grid:2048,qmm8_grid:1024,qmm8_grid:2048,qmm6_grid:1024,qmm6_grid:2048,qmm5_grid:1024,qmm5_grid:2048} \
  timeout ${DEADLINE_S:-480} python3 docs/tools/device/kernel_rates.py
echo "rc $?"
