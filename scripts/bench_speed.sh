#!/usr/bin/env bash
# The speed issue's measurements on one GPU, each side by side in one run (scripts/bench_rl.py):
#   bash scripts/bench_speed.sh imdb|math          # one process alone: the profile's settings against each speed
#                                                  # option, with the profiled iteration's kernel count and GPU time
#   bash scripts/bench_speed.sh workers GROUP N [VARIANT]  # N processes at once (as the train stage runs them),
#                                                  # without and then with CUDA MPS (kernels of different processes
#                                                  # run at the same time instead of taking turns on the GPU;
#                                                  # MPS=on|off: only with / without it); with VARIANT, that only
# Output in $OUT/bench-<what>.txt and on stdout.
set -uo pipefail
what=${1:?usage: $0 imdb|math | workers GROUP N [VARIANT]}; shift
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-4}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
FILTER="Loading|Writing|LOAD REPORT|^Key|^---|MISSING|^Notes|^\s*$|_warn_once|profiler"
static=ppo.generation.cache=static dynamic=ppo.generation.cache=dynamic compile=ppo.compile=true aligned=ppo.align_head=true fp32=ppo.mixed_precision=false
bench() { python3 -m scripts.bench_rl "$@" 2>&1 | grep -Ev "$FILTER" | tee -a "$OUT/bench-$what.txt"; }
case "$what" in
  # (measured 2026-11-27 and dropped from the list: math micro-batches of 128 x 1 instead of 32 x 4, no faster)
  imdb) bench --group imdb --run cory --iterations 5 --warmup 4 --profile --variant "$aligned" --variant "$fp32" \
          --variant "$static" --variant "$compile" --variant "$aligned,$compile" --variant "$static,$compile" ;;
  # (the math runs' profile settings have the static cache since 2026-11-27: "$dynamic" is the option there)
  math) bench --group math --run cory --iterations 3 --warmup 3 --profile --variant "$aligned" --variant "$fp32" \
          --variant "$dynamic" --variant "$compile" --variant "$aligned,$compile" ;;
  workers)
    group=${1:?group} n=${2:?workers} variant=${3:-}
    args=(--group "$group" --run cory --iterations 3 --warmup 3 --workers "$n")
    [ -n "$variant" ] && args+=(--variant "$variant" --no-baseline)
    if [ "${MPS:-both}" != on ]; then echo "== without MPS" | tee -a "$OUT/bench-$what.txt"; bench "${args[@]}"; fi
    if [ "${MPS:-both}" != off ]; then echo "== with MPS" | tee -a "$OUT/bench-$what.txt"; bench "${args[@]}" --mps; fi ;;
  *) echo "unknown: $what" >&2; exit 2 ;;
esac
