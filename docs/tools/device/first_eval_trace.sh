#!/usr/bin/env bash
# Device call 2 (after docs/tools/device/device_stage.sh): the host's CUDA-graph calls and the device's graph runs of
# a first eval, cold and warm (chunk_timing.py --runs 3 on one-chunk prompts, each config in a process of its own,
# traced by the CUPTI library cold_trace.c, built here against the machine's CUDA). An untraced process first
# builds each model's kernels, so the traced cold pass is a process's first eval as the stored runs' were
# (docs/generation.md, "CUDA: a first eval cold and warm"). Writes $OUT/first-eval-trace.tar.xz (trace-NAME.txt, timing-NAME.jsonl). SKIP_BUILD=1: a machine
# that has built the kernels already (MLX keeps them under /tmp/mlx). RUNS: other runs than these (the second
# trace: docs/generation.md, "CUDA: a first eval traced", item 6).
set -o pipefail; export STAGE=/tmp/stage SITE=/tmp/site; source docs/tools/device/device_unpack.sh || exit 3
start=$(date +%s); deadline=${DEADLINE_S:-540}
nvidia-smi -L | tee $OUT/device.txt
inc=$(dirname "$(find /usr/local/cuda/ -name cupti.h 2>/dev/null | head -1)")
lib=$(find /usr/local/cuda/ -name 'libcupti.so*' 2>/dev/null | sort | head -1)
echo "cupti: $inc $lib" | tee -a $OUT/device.txt
gcc -shared -fPIC -O2 -o /tmp/cold_trace.so docs/tools/device/cold_trace.c -I/usr/local/cuda/include -I"$inc" \
  "$lib" -Wl,-rpath,"$(dirname "$lib")" || exit 4
D=docs/tools/device/heldout12/deepseek-v2-lite-chat-4bit.json
run() {  # SECONDS NAME CONFIG TOKENS [trace]
  local left=$(( deadline - ($(date +%s) - start) )); local t=$(( left < $1 ? left : $1 ))
  if [ "$t" -lt 20 ]; then echo "$2 skipped: ${left}s left"; return; fi
  local env=()
  [ -n "${5:-}" ] && env=(CUDA_INJECTION64_PATH=/tmp/cold_trace.so COLD_TRACE_OUT=$OUT/trace-$2.txt)
  env "${env[@]}" timeout "$t" python3 docs/tools/device/chunk_timing.py "$3" --tokens "$4" --step "$4" --runs 3 \
    > $OUT/timing-$2.jsonl 2> $OUT/timing-$2.err
  echo "$2 rc $? $(date +%T)"
}
if [ -n "${RUNS:-}" ]; then  # SECONDS:NAME:CONFIG:TOKENS[:trace] ..., in order
  for r in $RUNS; do IFS=: read -r sec name config tokens trace <<< "$r"; run "$sec" "$name" "$config" "$tokens" $trace; done
else
  [ -z "${SKIP_BUILD:-}" ] && run 170 qwen-build qwen3-30b-a3b-4bit 1024
  run 60 qwen1k qwen3-30b-a3b-4bit 1024 trace
  run 60 qwen2k qwen3-30b-a3b-4bit 2048 trace
  [ -z "${SKIP_BUILD:-}" ] && run 60 ds-build $D 2560
  run 60 ds2560 $D 2560 trace
  run 40 llama1b-a llama-3.2-1b-instruct 1024 trace
  run 40 llama1b-b llama-3.2-1b-instruct 1024 trace
  [ -z "${SKIP_BUILD:-}" ] && run 60 gptoss-build gpt-oss-20b 1536
  run 60 gptoss1536 gpt-oss-20b 1536 trace
fi
cd $OUT && tar cJf first-eval-trace.tar.xz trace-*.txt timing-* && rm -f trace-*.txt timing-*; ls -la $OUT
