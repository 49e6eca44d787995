#!/usr/bin/env bash
# How the train stage's pool shares one GPU's memory when the default profile's runs do not all fit at once (its
# six SmolLM2 runs beside ten scratch ones at the stage's start), in a few minutes instead of a full repro: the
# default profile with every base model pretrained for one epoch (the reward model for half of one) and every
# training run cut to 30 iterations, then `dvc repro train`. Prints the pool's out-of-memory lines, the stage's
# seconds, and each run's wall time and peak GPU memory (into the job's log). Run it in a copy
# of the repository (it rewrites params.yaml), as ops/offline-gpu/device_repro.sh does:
#   RUN="bash ops/offline-gpu/pool_memory.sh" bash ops/offline-gpu/device_repro.sh start
set -euo pipefail
python3 - <<'PY'
import yaml

with open("params.yaml") as f:
    params = yaml.safe_load(f)
for name, model in params["base_models"].items():
    if "pretrain" in model:
        model["pretrain"]["epochs"] = 1.0
params["reward_model"]["classifier"]["epochs"] = 0.5
params["train"]["iterations"] = 30
for experiment in params["experiments"].values():
    if "iterations" in experiment.get("train", {}):
        experiment["train"]["iterations"] = 30
with open("params.yaml", "w") as f:
    yaml.safe_dump(params, f, sort_keys=False)
PY
dvc repro train
python3 - <<'PY'
import json
from pathlib import Path

print(json.loads(Path("outputs/default/metrics/timing/train.json").read_text()))
for path in sorted(Path("outputs/default/runs").glob("*/*/seed*/summary.json")):
    summary = json.loads(path.read_text())
    print(path.parent.relative_to("outputs/default/runs"), "peak GPU GiB", round(summary.get("peak_gpu_memory_gib") or 0, 2),
          "seconds", round(summary["wall_time_s"], 1))
PY
