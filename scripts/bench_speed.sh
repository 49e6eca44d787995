#!/usr/bin/env bash
# The speed issue's measurements on one GPU: one process alone, the profile's settings against each speed option,
# side by side in one run (scripts/bench_rl.py), with the profiled iteration's kernel count and GPU-busy time.
#   bash scripts/bench_speed.sh imdb|math [WORKERS...]   # output in $OUT/bench-<group>.txt (and on stdout)
# WORKERS: also time that many processes at once for the profile's settings and the fastest option set.
set -uo pipefail
group=${1:?usage: $0 imdb|math [WORKERS...]}; shift
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-8}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
static=ppo.generation.cache=static compile=ppo.compile=true
case "$group" in
  imdb) iterations=5 variants=("$static" "$compile" "$static,$compile") ;;
  math) iterations=3 one=ppo.mini_batch_size=128,ppo.gradient_accumulation_steps=1,ppo.forward_batch_size=128
        variants=("$static" "$compile" "$one" "$static,$compile,$one") ;;
  *) echo "unknown group $group" >&2; exit 2 ;;
esac
args=(--group "$group" --run cory --iterations "$iterations" --warmup 4 --profile)
for v in "${variants[@]}"; do args+=(--variant "$v"); done
[ $# -gt 0 ] && args+=(--workers "$@")
python3 -m scripts.bench_rl "${args[@]}" 2>&1 | grep -v "Loading\|Writing\|LOAD REPORT\|^Key\|^---\|MISSING\|^Notes\|^\s*$" \
  | tee "$OUT/bench-$group.txt"
