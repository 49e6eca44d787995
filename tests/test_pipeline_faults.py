"""Faults injected into a reproduced smoke pipeline (a copy of the session's `dvc repro`), through the stages' own
entry points: damaged units are trained again and named while every other unit is kept, a base model trained again
to the same weights leaves the runs that read it current, and MLflow unavailable to a pool of workers is one warning
with the outputs intact."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from smoke import clean_env, sh

from cory.files import mismatch

pytestmark = pytest.mark.smoke


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01
    path.write_bytes(bytes(data))


def test_damaged_units_are_trained_again_and_named_the_rest_kept(smoke_repo, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    outputs = repo / "outputs/smoke"
    runs = sorted(p.relative_to(outputs / "runs") for p in (outputs / "runs").glob("*/*/seed0"))
    before = {run: (outputs / "runs" / run / "summary.json").read_bytes() for run in runs}

    history = outputs / "runs/imdb/ppo/seed0/history.csv"
    history.write_text("".join(history.read_text().splitlines(True)[:-1]))  # a truncated history
    weights = outputs / "checkpoints/math/cory/seed0/llm2/model.safetensors"
    flip_a_byte(weights)  # a bit-flipped saved agent
    base = outputs / "models/math/model.safetensors"
    trained = base.read_bytes()
    flip_a_byte(base)  # a bit-flipped base model

    env = clean_env()
    out = sh(sys.executable, "-m", "pipeline.base_models", "math", cwd=repo, env=env)
    assert f"[base_models] math: {base}: its content differs from the recorded sha256: trained again" in out, out
    assert base.read_bytes() == trained  # the same weights (CPU training is deterministic); another training.json

    # the pool of two workers, and an MLflow store that cannot be opened (its folder is a file)
    (tmp_path / "blocker").write_text("")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["runtime"]["workers"] = 2
    (repo / "workers.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    result = subprocess.run([sys.executable, "-m", "pipeline.train"], cwd=repo, capture_output=True, text=True, env={
        **env, "CORY_PARAMS": str(repo / "workers.yaml"), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/blocker/db"})
    out, err = result.stdout, result.stderr
    assert result.returncode == 0, out[-3000:] + err[-3000:]
    assert f"[train] imdb/ppo/seed0: {history}: 3 lines, its record says 4: trained again" in out, out
    assert f"[train] math/cory/seed0: {weights}: its content differs from the recorded sha256: trained again" in out
    assert f"[train] {len(runs)} runs: {len(runs) - 2} finished with the same fingerprint (kept), 0 to resume, " \
           "2 to train" in out, out  # math/ppo among the kept: its base model's record changed, its weights did not
    warnings = [line for line in err.splitlines() if "MLflow unavailable" in line]
    assert len(warnings) == 1 and "Traceback" not in err, err[-3000:]

    after = {run: (outputs / "runs" / run / "summary.json").read_bytes() for run in runs}
    assert sorted(str(run) for run in runs if after[run] != before[run]) == ["imdb/ppo/seed0", "math/cory/seed0"]
    for run in ("imdb/ppo/seed0", "math/cory/seed0"):  # trained again: their files are what they record
        summary = json.loads((outputs / "runs" / run / "summary.json").read_text())
        assert mismatch(outputs / "runs" / run, summary["files"]) is None
    assert (repo / "outputs/smoke/.stage.lock").read_text() == ""  # released, its holder's name cleared
