#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): CUPTI traces of whole multi-chunk prompts, to see which of a
# generation's later prompt chunks instantiate CUDA graphs, which update cached ones in place, and whether their
# instantiations wait for the device as a process's first eval's do (docs/generation.md, "CUDA: a generation's later
# chunks traced"). chunk_timing.py --sync --runs 2 (mlx-lm's loop: mx.eval of the caches' state, mx.clear_cache()
# after each chunk; the first pass cold, the second warm), each config in a process of its own after an untraced one
# that builds its kernels. Writes $OUT/$ARCHIVE (default chunk-trace.tar.xz: trace-NAME.txt, timing-NAME.jsonl).
# RUNS overrides the configs (SECONDS:NAME:CONFIG:TOKENS:STEP:RUNS[:trace] ...), as device_time_trace.sh does.
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
start=$(date +%s); deadline=${DEADLINE_S:-540}
nvidia-smi -L | tee $OUT/device.txt
python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device())" | tee -a $OUT/device.txt
inc=$(dirname "$(find /usr/local/cuda/ -name cupti.h 2>/dev/null | head -1)")
lib=$(find /usr/local/cuda/ -name 'libcupti.so*' 2>/dev/null | sort | head -1)
gcc -shared -fPIC -O2 -o /tmp/cold_trace.so docs/tools/device/cold_trace.c -I/usr/local/cuda/include -I"$inc" \
  "$lib" -Wl,-rpath,"$(dirname "$lib")" || exit 4
run() {  # SECONDS NAME CONFIG TOKENS STEP RUNS [trace]
  local left=$(( deadline - ($(date +%s) - start) )); local t=$(( left < $1 ? left : $1 ))
  if [ "$t" -lt 20 ]; then echo "$2 skipped: ${left}s left"; return; fi
  local env=()
  [ -n "${7:-}" ] && env=(CUDA_INJECTION64_PATH=/tmp/cold_trace.so COLD_TRACE_OUT=$OUT/trace-$2.txt)
  env "${env[@]}" timeout "$t" python3 docs/tools/device/chunk_timing.py "$3" --tokens "$4" --step "$5" --runs "$6" \
    --sync > $OUT/timing-$2.jsonl 2> $OUT/timing-$2.err
  echo "$2 rc $? $(date +%T)"
}
H9=docs/tools/device/heldout9; H11=docs/tools/device/heldout11; P=kvsim/data/configs/public
RUNS=${RUNS:-"100:b-q4:$P/qwen3-4b-4bit.json:8192:2048:1 60:q4:$P/qwen3-4b-4bit.json:8192:2048:2:trace
100:b-mis6:$H11/mistral-7b-instruct-v0.3-6bit.json:4096:2048:1 60:mis6:$H11/mistral-7b-instruct-v0.3-6bit.json:4096:2048:2:trace
60:b-llama8:llama-3.1-8b-instruct:8192:2048:1 60:llama8:llama-3.1-8b-instruct:8192:2048:2:trace
60:l8q16:$P/llama-3.1-8b-4bit.json:16384:2048:2:trace
100:b-phi4:$H9/phi-3-mini-4k-instruct-4bit.json:8192:2048:1 60:phi4:$H9/phi-3-mini-4k-instruct-4bit.json:8192:2048:2:trace"}
for r in $RUNS; do
  IFS=: read -r sec name config tokens step runs trace <<< "$r"; run "$sec" "$name" "$config" "$tokens" "$step" "$runs" $trace
done
cd $OUT && tar cJf ${ARCHIVE:-chunk-trace.tar.xz} trace-*.txt timing-* && rm -f trace-*.txt timing-*; ls -la $OUT
