#!/usr/bin/env bash
# Throughput, old against new in one call on one machine: the RL bench of an earlier commit (default 40b46c7, the
# commit that recorded the 991 s default repro docs/speed.md starts from) and benchmark/rl.py of this working tree, one after the other, with the same processes sharing the GPU.
#   bash lab/bench/then_now.sh [GROUP [RUN]]        # default: imdb cory
#   THEN=<commit> WORKERS="12 14" ITERATIONS=6 bash lab/bench/then_now.sh math cory
# The earlier commit is checked out beside this tree (git worktree, from the .git the lending tool sends with it);
# the default's bench has no --warmup or --mps (it warms up 2 iterations and runs without MPS, as its train stage did
# with 14 processes), this tree's runs as the train stage does now (runtime.mps); a later commit's bench that has both
# runs with the same arguments as this tree's. On the lending tool, run `bash
# lab/offline-gpu/device_repro.sh install` first. Results: both benches' outputs, appended to $OUT/bench_then_now.txt where OUT is set.
# Run on one H200 (2026-11-29: imdb cory and imdb ppo with the defaults, then imdb cory alone, in 490 s; the numbers
# are in docs/speed.md); note that the math group's work per iteration changed after 40b46c7 (128 samples instead of
# 32), so its iterations per second do not compare.
set -euo pipefail
group=${1:-imdb}
run=${2:-cory}
then_commit=${THEN:-40b46c7}
workers=${WORKERS-12 14}  # WORKERS="" times one process alone (both sides without MPS: one process has no one to share with)
mps=${workers:+--mps}
iterations=${ITERATIONS:-6}
log=${OUT:+$OUT/bench_then_now.txt}
[ -n "${OUT:-}" ] && mkdir -p "$OUT"
then_tree=/tmp/bench-then-$then_commit
git worktree remove --force "$then_tree" 2>/dev/null || rm -rf "$then_tree"
git worktree add -q --detach "$then_tree" "$then_commit"
{
  # where an earlier commit has it: benchmark/rl.py, or before that scripts/bench_rl.py, as a module of its package
  # or (the first commits) as a file
  if [ -f "$then_tree/benchmark/rl.py" ]; then bench="-m benchmark.rl" file=benchmark/rl.py
  elif [ -f "$then_tree/scripts/__init__.py" ]; then bench="-m scripts.bench_rl" file=scripts/bench_rl.py
  else bench=scripts/bench_rl.py file=scripts/bench_rl.py; fi
  # an earlier commit whose bench has --warmup and --mps runs exactly as this tree's does
  same=$(grep -q -- '"--mps"' "$then_tree/$file" && echo "--warmup 2 $mps" || true)
  echo "== then: commit $then_commit (python $bench --group $group --run $run --iterations $iterations --workers $workers $same)"
  (cd "$then_tree" && python3 $bench --group "$group" --run "$run" --iterations "$iterations" --workers $workers $same)
  echo "== now: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + uncommitted changes')" \
    "(python -m benchmark.rl --group $group --run $run --iterations $iterations --warmup 2 --workers $workers $mps)"
  python3 -m benchmark.rl --group "$group" --run "$run" --iterations "$iterations" --warmup 2 --workers $workers $mps
} 2>&1 | grep --line-buffered -Ev "Loading|Writing" | tee -a ${log:-/dev/null}
git worktree remove --force "$then_tree"
