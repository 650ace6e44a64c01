#!/usr/bin/env bash
# Device call 1 of 2: keep the first part of the carried MLX-CUDA archive outside the repo.
# Usage (repo root, with .whl carried): bash docs/tools/device/device_stage.sh [STAGE_DIR]
set -euo pipefail
stage=${1:-/tmp/stage}
mkdir -p "$stage"
cp .whl/cuda.tar.xz.part* "$stage"/
ls -la "$stage"
nvidia-smi -L || true
python3 -c 'import sys, nvidia; print(sys.version.split()[0], list(nvidia.__path__))' || true
