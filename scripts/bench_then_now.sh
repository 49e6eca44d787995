#!/usr/bin/env bash
# The speed issue's throughput, old against new in one call on one machine: scripts/bench_rl.py of an earlier commit
# (default b91d322, the first with the benchmark: the code the speed issue was measured on, 2026-11-26, its table in
# docs/speed.md) and of this working tree, one after the other, with the same processes sharing the GPU.
#   bash scripts/bench_then_now.sh [GROUP [RUN]]        # default: imdb cory
#   THEN=<commit> WORKERS="12 14" ITERATIONS=6 bash scripts/bench_then_now.sh math cory
# The earlier commit is checked out beside this tree (git worktree, from the .git the lending tool sends with it);
# its bench has no --warmup or --mps (it warms up 2 iterations and runs without MPS), this tree's runs as the train
# stage does (runtime.mps). On the lending tool, run `bash scripts/device_repro.sh install` first. Results: the two
# benches' outputs in $OUT/bench_then_now.txt where OUT is set, else stdout only.
# (Checked here on the CPU, 2026-11-29: b91d322's bench runs with torch 2.13 and transformers 5.24, one iteration of
# IMDB CORY in 43 s; on a GPU it says nothing yet.)
set -euo pipefail
group=${1:-imdb}
run=${2:-cory}
then_commit=${THEN:-b91d322}
workers=${WORKERS-12 14}  # WORKERS="" times one process alone
iterations=${ITERATIONS:-6}
log=${OUT:+$OUT/bench_then_now.txt}
[ -n "${OUT:-}" ] && mkdir -p "$OUT"
then_tree=/tmp/bench-then-$then_commit
git worktree remove --force "$then_tree" 2>/dev/null || rm -rf "$then_tree"
git worktree add -q --detach "$then_tree" "$then_commit"
{
  echo "== then: commit $then_commit (python scripts/bench_rl.py --group $group --run $run --iterations $iterations --workers $workers)"
  (cd "$then_tree" && python3 scripts/bench_rl.py --group "$group" --run "$run" --iterations "$iterations" --workers $workers)
  echo "== now: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + uncommitted changes')" \
    "(python -m scripts.bench_rl --group $group --run $run --iterations $iterations --warmup 2 --workers $workers --mps)"
  python3 -m scripts.bench_rl --group "$group" --run "$run" --iterations "$iterations" --warmup 2 --workers $workers --mps
} 2>&1 | grep --line-buffered -Ev "Loading|Writing" | tee ${log:-/dev/null}
git worktree remove --force "$then_tree"
