#!/usr/bin/env bash
# The train stage on one GPU against all visible GPUs, side by side in one session (docs/scale.md):
# throughput (run-iterations per second) and whether each run's curves stay the same.
#   bash lab/bench/gpus.sh [GROUP ...]       # default: imdb; on a machine with 2+ GPUs (kind nvidia-h100-x2)
# It first runs the stages the groups need (dvc repro train's upstream, cached), then trains the groups twice in two
# copies of the repository, CUDA_VISIBLE_DEVICES=<the first> and then every GPU (ALL=2,3: those two), and compares every run's history.csv.
# BESIDE=<repository copy> instead: that copy's `dvc repro` (lab/offline-gpu/device_repro.sh, started on one GPU) is the
# one-GPU side. Once its log says the train stage began, its base and reward models are copied and the groups
# (default: the whole train stage) train on ALL at the same time; its train stage's time and runs are then
# compared with these. Both sides train the same models, so each side's runs start from the same weights; give
# each side the cores its machine would have (taskset), since they run side by side.
# Results: $OUT/bench_gpus.txt where OUT is set (the lending tool), else stdout only.
set -euo pipefail
all=${ALL:-$(python3 -c "import torch; print(','.join(map(str, range(torch.cuda.device_count()))))")}  # ALL=0,1 to choose
one=${all%%,*}  # the first of them alone
profile=$(python3 -c "import yaml; print(yaml.safe_load(open('params.yaml'))['profile'])")
[ -n "${OUT:-}" ] && mkdir -p "$OUT"
: > /tmp/bench-gpus.times   # "GPUS SECONDS" per training, this call's only
train_copy() {  # train_copy SOURCE GPUS GROUPS...: train in a copy of SOURCE without its runs; its time to the list
  local source=$1 gpus=$2 copy=/tmp/bench-gpus-${2//,/_} start; shift 2
  # without its runs and checkpoints: a BESIDE source is training while it is copied, its checkpoints gigabytes that
  # are written and replaced as it goes. (2026-11-28, with a plain `cp -a` of it: the two GPUs stayed idle for the
  # 230 s the call lasted after the source's train stage began, with nothing in the log: still copying, most likely)
  rm -rf "$copy" && mkdir -p "$copy"
  # (tar's status 1: a file changed while it was read, such as the source's log or MLflow database; not an error here)
  { tar -C "$source" --exclude="./outputs/$profile/runs" --exclude=./checkpoints --warning=no-file-changed -cf - . ||
    [ $? -eq 1 ]; } | tar -C "$copy" -xf -
  start=$(date +%s.%N)
  (cd "$copy" && CUDA_VISIBLE_DEVICES=$gpus python3 -m pipeline.train "$@" > train.log 2>&1)
  echo "$gpus $(python3 -c "import time; print(time.time() - $start)")" >> /tmp/bench-gpus.times
}
if [ -n "${BESIDE:-}" ]; then
  until grep -q "Running stage 'train'" "$BESIDE/repro.log" 2>/dev/null; do sleep 5; done
  train_copy "$BESIDE" "$all" "$@"
  until grep -q "Running stage 'evaluate'" "$BESIDE/repro.log" 2>/dev/null; do sleep 5; done
  one=beside one_runs=$BESIDE/outputs/$profile/runs
  echo "beside $(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['seconds'])" \
    "$BESIDE/outputs/$profile/metrics/timing/train.json")" >> /tmp/bench-gpus.times
else
  groups=(${@:-imdb})
  dvc repro prepare_imdb prepare_math base_models
  for gpus in "$one" "$all"; do train_copy . "$gpus" "${groups[@]}"; done
  one_runs=/tmp/bench-gpus-${one//,/_}/outputs/$profile/runs
fi
python3 - "$profile" "$one" "$all" "$one_runs" <<'PY' | tee ${OUT:+"$OUT/bench_gpus.txt"}
import csv, statistics, sys
from pathlib import Path
profile, one_gpu, all_gpus, one_runs = sys.argv[1:5]
times = dict(line.split() for line in open("/tmp/bench-gpus.times").read().splitlines())
one, many = Path(one_runs), Path(f"/tmp/bench-gpus-{all_gpus.replace(',', '_')}/outputs/{profile}/runs")
histories = sorted(one.glob("*/*/seed*/history.csv"))
iterations = sum(sum(1 for _ in open(h)) - 1 for h in histories)
t1, tn = float(times[one_gpu]), float(times[all_gpus])
print(f"{len(histories)} runs, {iterations} iterations: one GPU ({one_gpu}) {t1:.0f} s, GPUs {all_gpus} {tn:.0f} s; "
      f"throughput x{t1 / tn:.2f}")
worst, last = {}, {}
for h in histories:
    a = list(csv.DictReader(open(h)))
    b = list(csv.DictReader(open(many / h.relative_to(one))))
    assert len(a) == len(b), h
    run = str(h.parent.parent.relative_to(one))
    for key in ("llm1/task_reward", "llm1/kl"):
        diff = max(abs(float(x[key]) - float(y[key])) for x, y in zip(a, b))
        worst[key] = max(worst.get(key, 0.0), diff)
        for side, rows in (("one", a), ("many", b)):
            last.setdefault((run, key, side), []).append(statistics.mean(float(x[key]) for x in rows[-10:]))
print("largest difference of any run at any iteration between the two:", {k: f"{v:.3g}" for k, v in worst.items()})
print("mean of the last 10 iterations, per seed: one GPU | all GPUs")
for run in sorted({r for r, _, _ in last}):
    print(run, " ".join(f"{key.split('/')[1]} " + " ".join(f"{v:.3g}" for v in last[run, key, "one"]) + " | "
                        + " ".join(f"{v:.3g}" for v in last[run, key, "many"]) for key in ("llm1/task_reward", "llm1/kl")))
PY
