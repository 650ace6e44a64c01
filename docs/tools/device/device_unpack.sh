#!/usr/bin/env bash
# Sourced on the device after docs/tools/device/device_stage.sh: join the MLX-CUDA archive parts, unpack the
# small wheels beside it, and export PYTHONPATH / LD_LIBRARY_PATH. Env: STAGE, SITE, PY.
stage=${STAGE:-/tmp/stage}; site=${SITE:-/tmp/site}; py=${PY:-python3}
mkdir -p "$site"
if [ ! -e "$site/mlx_lm" ]; then  # a second source in the same call finds it unpacked
  cat "$stage"/cuda.tar.xz.part* .whl2/cuda.tar.xz.part* | xz -d | tar x -C "$site" || { echo "unpack failed"; return 3; }
  for w in .whl2/*.whl; do "$py" -m zipfile -e "$w" "$site" || return 3; done
fi
nv=$("$py" -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
if [ -n "$nv" ] && [ ! -e "$site/nvidia" ]; then ln -s "$nv" "$site/nvidia"; fi  # libmlx.so RPATH: $ORIGIN/../../nvidia/*
[ -n "$nv" ] && export LD_LIBRARY_PATH="$(find "$nv" -name 'lib*.so*' -printf '%h\n' | sort -u | tr '\n' ':')${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$site:$PWD"
[ -n "${DRY:-}" ] && export PYTHONPATH="$PWD"  # local dry run: the cp312 CUDA build cannot load here
return 0
