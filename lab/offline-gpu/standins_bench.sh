#!/usr/bin/env bash
# The paper profile's costs (docs/scale.md) on a GPU machine: build the paper's stand-ins there (nothing large travels), switch to the
# paper_standins profile and time every run of it (reports/paper_standins/scale.json; copy it to reports/paper/).
# bitsandbytes (4-bit NF4 Llama-2) must be installed first where the profile asks for it; a math run that fails in
# 4-bit is timed again with the base in bf16 (reports/paper_standins/scale_bf16.json).
#   bash lab/offline-gpu/standins_bench.sh [ITERATIONS]       # on the lent machine through lab/offline-gpu/device_repro.sh (RUN=...)
set -uo pipefail
iterations=${1:-2}
python3 -m tools.build_standins standins --profile paper_standins --offline-data --device cuda || exit 1
python3 -m pipeline.profile paper_standins || exit 1
python3 -m benchmark.paper --iterations "$iterations"
python3 - <<'PY' && python3 -m benchmark.paper --iterations "$iterations" --set load_in_4bit=false \
    --set ppo.speed.dequantize_4bit=false \
    --only math/ppo math/cory --out reports/paper_standins/scale_bf16.json
import json, sys
runs = json.load(open("reports/paper_standins/scale.json"))["runs"]
sys.exit(0 if any("error" in r for k, r in runs.items() if k.startswith("math")) else 1)
PY
exit 0
