#!/usr/bin/env bash
# The train stage on one GPU against all visible GPUs, side by side in one session (the paper-scale issue, item 4):
# throughput (run-iterations per second) and whether each run's curves stay the same.
#   bash scripts/bench_gpus.sh [GROUP ...]       # default: imdb; on a machine with 2+ GPUs (kind nvidia-h100-x2)
# It first runs the stages the groups need (dvc repro train's upstream, cached), then trains the groups twice in two
# copies of the repository, CUDA_VISIBLE_DEVICES=<the first> and then every GPU (ALL=2,3: those two), and compares every run's history.csv.
# Results: $OUT/bench_gpus.txt where OUT is set (the lending tool), else stdout only.
set -euo pipefail
groups=${*:-imdb}
all=${ALL:-$(python3 -c "import torch; print(','.join(map(str, range(torch.cuda.device_count()))))")}  # ALL=0,1 to choose
one=${all%%,*}  # the first of them alone
dvc repro prepare_imdb prepare_math base_model@imdb_small base_model@imdb_large base_model@math reward_model
profile=$(python3 -c "import yaml; print(yaml.safe_load(open('params.yaml'))['profile'])")
: > /tmp/bench-gpus.times   # "GPUS SECONDS" per training, this call's only
for gpus in "$one" "$all"; do
  copy=/tmp/bench-gpus-${gpus//,/_}
  rm -rf "$copy" && cp -a . "$copy"
  rm -rf "$copy/outputs/$profile/runs" "$copy/checkpoints"
  start=$(date +%s.%N)
  (cd "$copy" && CUDA_VISIBLE_DEVICES=$gpus python3 -m pipeline.train $groups > train.log 2>&1)
  echo "$gpus $(python3 -c "import time; print(time.time() - $start)")" >> /tmp/bench-gpus.times
done
python3 - "$profile" "$one" "$all" <<'PY' | tee ${OUT:+"$OUT/bench_gpus.txt"}
import csv, sys
from pathlib import Path
profile, one_gpu, all_gpus = sys.argv[1:4]
times = dict(line.split() for line in open("/tmp/bench-gpus.times").read().splitlines())
one, many = (Path(f"/tmp/bench-gpus-{g.replace(',', '_')}/outputs/{profile}/runs") for g in (one_gpu, all_gpus))
histories = sorted(one.glob("*/*/seed*/history.csv"))
iterations = sum(sum(1 for _ in open(h)) - 1 for h in histories)
t1, tn = float(times[one_gpu]), float(times[all_gpus])
print(f"{len(histories)} runs, {iterations} iterations: GPU {one_gpu} {t1:.0f} s, GPUs {all_gpus} {tn:.0f} s; "
      f"throughput x{t1 / tn:.2f}")
worst = {}
for h in histories:
    a = list(csv.DictReader(open(h)))
    b = list(csv.DictReader(open(many / h.relative_to(one))))
    assert len(a) == len(b), h
    for key in ("llm1/task_reward", "llm1/kl"):
        diff = max(abs(float(x[key]) - float(y[key])) for x, y in zip(a, b))
        worst[key] = max(worst.get(key, 0.0), diff)
print("largest difference of any run at any iteration between the two:", {k: f"{v:.3g}" for k, v in worst.items()})
PY
