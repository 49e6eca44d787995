#!/usr/bin/env bash
# The paper's GPT-2 Large shape (batch 256, 16 new tokens), an earlier commit against this tree on one GPU in one job:
# benchmark/paper.py of commit THEN (default 169227e, 2026-11-27: the README's paper-scale table, measured on one
# H100) and then of this tree, on the same stand-ins (built once, here, on the GPU), each with its own profiles (the
# settings of the paper profile as they were then and are now): the speed work must not slow PPO or CORY down at
# this shape, whose targets are PPO <= 1.0 s and CORY <= 2.0x PPO per iteration (docs/speed.md).
#   bash lab/bench/paper_then_now.sh [VARIANT ...]   # VARIANTs (comma-separated KEY=VALUE) run this tree again with them
#   THEN=<commit> WARMUP=2 ITERATIONS=3 bash lab/bench/paper_then_now.sh
# On one H200 it took 232 s with the defaults and one variant (stand-ins 15 s), 183 s with ITERATIONS=8 and 261 s with
# 20 on the same warm machine: one call of the lending tool (after `bash lab/offline-gpu/device_repro.sh install`), e.g.
#   bash lab/offline-gpu/device_repro.sh install && ITERATIONS=20 bash lab/bench/paper_then_now.sh ppo.generation.cache=graph
# Since the paper profile samples with cache "graph" (2026-11-29), "ppo.generation.cache=static" is the variant to
# compare with.
# (SCALE=tiny DEVICE=cpu: the same steps at toy sizes, to try the script on a CPU, in a clone: it rewrites params.yaml)
# Output: the timings on stdout and in $OUT/paper_then_now.txt, each side's JSON in $OUT/paper-<side>.json.
set -euo pipefail
then_commit=${THEN:-169227e}
warmup=${WARMUP:-2}        # the static cache's compilations need 2
iterations=${ITERATIONS:-3}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
log=$OUT/paper_then_now.txt
filter="Loading|Writing|LOAD REPORT|^Key|^---|MISSING|^Notes|^\s*$|_warn_once|profiler|warnings.warn|UserWarning"
export PYTHONUNBUFFERED=1

echo "== stand-ins (gpt2-large, distilbert-imdb) built on the GPU" | tee -a "$log"
python3 -m tools.build_standins standins --only gpt2-large distilbert-imdb --profile paper_standins --offline-data \
  --device "${DEVICE:-cuda}" --scale "${SCALE:-full}" 2>&1 | grep -E "parameters|error" | tee -a "$log"
then_tree=/tmp/paper-then-$then_commit
git worktree remove --force "$then_tree" 2>/dev/null || rm -rf "$then_tree"
git worktree add -q --detach "$then_tree" "$then_commit"
ln -s "$PWD/standins" "$then_tree/standins"
module() {  # TREE NEW OLD: a module by its name in TREE (scripts.* before benchmark/ and tools/ existed)
  [ -d "$1/benchmark" ] && echo "$2" || echo "$3"
}
# the earlier tree's paper_standins profile from its own paper.yaml, on the stand-ins built above (none rebuilt)
(cd "$then_tree" && python3 -m "$(module "$then_tree" tools.build_standins scripts.build_standins)" standins --only \
  --profile paper_standins --offline-data > /dev/null)

bench() {  # TREE NAME [--set KEY=VALUE ...]
  local tree=$1 name=$2
  shift 2
  echo "== $name: $(git -C "$tree" rev-parse --short HEAD) (python -m benchmark.paper --iterations $iterations" \
    "--warmup $warmup --only imdb/ppo imdb/cory $*)" | tee -a "$log"
  (cd "$tree" && python3 -m pipeline.profile paper_standins > /dev/null &&
    python3 -m "$(module "$tree" benchmark.paper scripts.bench_paper)" --iterations "$iterations" --warmup "$warmup" \
      --only imdb/ppo imdb/cory "$@" \
      --out "$OUT/paper-$name.json") 2>&1 | grep -Ev "$filter" | tee -a "$log"
}

bench "$then_tree" then || echo "== then: failed" | tee -a "$log"
bench . now || echo "== now: failed" | tee -a "$log"
for variant in "$@"; do
  sets=()
  IFS=, read -ra pairs <<< "$variant"
  for pair in "${pairs[@]}"; do sets+=(--set "$pair"); done
  bench . "now-${variant//[^a-z0-9]/_}" "${sets[@]}" || echo "== $variant: failed" | tee -a "$log"
done
git worktree remove --force "$then_tree"
