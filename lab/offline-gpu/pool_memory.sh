#!/usr/bin/env bash
# How the train stage's pool shares one GPU's memory when the default profile's runs do not all fit at once (its
# six SmolLM2 runs beside ten scratch ones at the stage's start), in a few minutes instead of a full repro: the
# default profile with every base model pretrained for one epoch (the reward model for half of one) and every
# training run cut to 30 iterations, then `dvc repro train`. Prints the pool's out-of-memory lines, the stage's
# seconds, and each run's wall time and peak GPU memory (into the job's log). Run it in a copy
# of the repository (it rewrites params.yaml), as lab/offline-gpu/device_repro.sh does:
#   RUN="bash lab/offline-gpu/pool_memory.sh" bash lab/offline-gpu/device_repro.sh start
# ITERATIONS (default 30) sets every run's iterations; SMOLLM2_SEEDS (e.g. "0 1") the SmolLM2 group's seeds;
# SMOLLM2_PPO_ETAS (e.g. "0.12") adds a group smollm2_kl of single-agent PPO runs of that group's settings at each KL
# coefficient, on SMOLLM2_ETA_SEEDS (default "0 1 2 3"), so that the pool's memory and a run's CUDA errors are seen
# across the KL coefficients.
set -euo pipefail
python3 - <<'PY'
import os

import yaml

with open("params.yaml") as f:
    params = yaml.safe_load(f)
for name, model in params["base_models"].items():
    if "pretrain" in model:
        model["pretrain"]["epochs"] = 1.0
params["reward_model"]["classifier"]["epochs"] = 0.5
iterations = int(os.environ.get("ITERATIONS", 30))
params["train"]["iterations"] = iterations
for experiment in params["experiments"].values():
    if "iterations" in experiment.get("train", {}):
        experiment["train"]["iterations"] = iterations
smollm2 = params["experiments"]["imdb_smollm2"]
if os.environ.get("SMOLLM2_SEEDS"):
    smollm2["seeds"] = [int(s) for s in os.environ["SMOLLM2_SEEDS"].split()]
    params["report"]["test_claims"] = False  # fewer seeds than a claim's interval needs: the pool is what is looked at
etas = [float(x) for x in os.environ.get("SMOLLM2_PPO_ETAS", "").split()]
if etas:  # a group of their own: the same train block, its own seeds
    eta_seeds = [int(s) for s in os.environ.get("SMOLLM2_ETA_SEEDS", "0 1 2 3").split()]
    params["experiments"]["smollm2_kl"] = {
        **{k: v for k, v in smollm2.items() if k != "runs"}, "seeds": eta_seeds,
        "runs": {f"ppo_kl{eta:g}".replace(".", ""): {"model": "smollm2", "train": {
            "cory": {"n_agents": 1}, "ppo": {"init_kl_coef": eta}}} for eta in etas}}
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
