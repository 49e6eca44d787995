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


FAULTS = '''
"""Faults in the train stage's runs, injected in every Python process that starts with this folder on PYTHONPATH
(the stage and its spawned workers) while $CORY_TEST_FAULTS is set: {run: fault} as JSON."""
import json
import os
import signal

FAULTS = json.loads(os.environ.get("CORY_TEST_FAULTS", "{}"))
if FAULTS:
    import torch
    import cory.runs.run as run
    from cory.rl.trainer import Trainer

    iteration = run._iteration

    def faulty(one, it, *args):
        fault = FAULTS.get(one.job.name) if it == 2 else None
        if fault == "SIGKILL":  # what the kernel's out-of-memory killer does
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "CUDA":  # a device-side assert while scoring, as torch raises it
            rewards = Trainer._rewards

            def assert_triggered(self, *a, **k):
                raise torch.AcceleratorError("CUDA error: device-side assert triggered")

            Trainer._rewards = assert_triggered
            try:
                return iteration(one, it, *args)
            finally:
                Trainer._rewards = rewards
        return iteration(one, it, *args)

    run._iteration = faulty
'''


def test_a_cuda_error_and_a_killed_worker_fail_their_runs_alone_and_both_resume(smoke_repo, tmp_path):
    """Through the train stage's entry point, two worker processes: imdb/ppo's worker is killed (SIGKILL) and
    math/ppo meets a CUDA device-side assert while scoring, both in iteration 2; imdb/cory trains. The stage names
    each failed run in one line (iteration and phase; the signal and the host's memory), ends with its summary and
    no traceback, keeps what finished, and run again resumes both failed runs from their checkpoints."""
    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    outputs = repo / "outputs/smoke"
    total = len(list((outputs / "runs").glob("*/*/seed*")))  # the smoke profile's runs
    for run in ("imdb/ppo", "math/ppo", "imdb/cory"):
        for root in ("runs", "checkpoints"):
            shutil.rmtree(outputs / root / run / "seed0", ignore_errors=True)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["runtime"]["workers"] = 2
    (repo / "workers.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults/sitecustomize.py").write_text(FAULTS)
    env = {**clean_env(), "CORY_PARAMS": str(repo / "workers.yaml"), "PYTHONPATH": f"{tmp_path / 'faults'}:{repo}",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    faults = json.dumps({"imdb/ppo/seed0": "SIGKILL", "math/ppo/seed0": "CUDA"})
    result = subprocess.run([sys.executable, "-m", "pipeline.train"], cwd=repo, capture_output=True, text=True,
                            env={**env, "CORY_TEST_FAULTS": faults}, timeout=1200)
    out, err = result.stdout, result.stderr
    assert result.returncode == 1, out[-3000:] + err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    cuda = ("AcceleratorError in iteration 2, scoring: CUDA error: device-side assert triggered")
    killed = "WorkerDied: its worker process was killed by SIGKILL while running it: likely the kernel's out-of-memory"
    assert [line for line in out.splitlines() if "math/ppo/seed0" in line] == [
        f"[train] math/ppo/seed0 FAILED: {cuda} (its worker process is replaced; a run resumes from its last "
        "checkpoint when the stage runs again)"]
    assert [line for line in out.splitlines() if "imdb/ppo/seed0" in line][0].startswith(
        f"[train] imdb/ppo/seed0 FAILED: {killed}")
    assert "[train] imdb/cory/seed0: " in out  # it trained beside them
    lines = err.strip().splitlines()
    summary = lines[next(i for i, line in enumerate(lines) if line.startswith("error: ")):]  # the stage's last words
    assert summary[0] == ("error: 2 of 3 runs failed (the 1 others finished and are kept; rerun the stage to train "
                          "the failed ones, from their checkpoints):")
    assert summary[1].startswith(f"  imdb/ppo/seed0: {killed}")
    assert summary[2] == f"  math/ppo/seed0: {cuda}"
    # after it, at most multiprocessing's resource tracker's word on what the killed process could not clean up
    assert all("resource_tracker" in line for line in summary[3:]), summary

    again = subprocess.run([sys.executable, "-m", "pipeline.train"], cwd=repo, capture_output=True, text=True,
                           env=env, timeout=1200)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{total - 2} finished with the same fingerprint (kept), 2 to resume, 0 to train" in again.stdout, \
        again.stdout
    for run in ("imdb/ppo/seed0", "math/ppo/seed0"):
        assert f"[train] {run}: resumed after iteration 1 from " in again.stdout


def test_params_changed_under_a_running_stage_are_not_recorded(smoke_repo, tmp_path):
    """`dvc repro` with a run to train, and params.yaml edited while the train stage runs: the stage fails with one
    line, dvc.lock still holds the settings the finished stages ran with, and `dvc status` names the train stage as
    changed (the next repro trains with the new settings)."""
    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    total = len(list((repo / "outputs/smoke/runs").glob("*/*/seed*")))  # the smoke profile's runs
    shutil.rmtree(repo / "outputs/smoke/runs/imdb/ppo/seed0")
    lock = (repo / "dvc.lock").read_bytes()
    env = clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db")
    dvc = subprocess.Popen(["dvc", "repro", "train"], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=env)
    lines = []
    for line in dvc.stdout:
        lines.append(line)
        if line.startswith(f"[train] {total} runs:"):  # the stage has read its params: an edit now is one it never saw
            params = repo / "params.yaml"
            params.write_text(params.read_text().replace("learning_rate: 1.41e-05", "learning_rate: 2.0e-05", 1))
    assert dvc.wait(timeout=1200) != 0
    said = "".join(lines)
    assert "error: params.yaml changed while the stage ran, which read it at its start" in said, said[-3000:]
    assert (repo / "dvc.lock").read_bytes() == lock
    status = json.loads(sh("dvc", "status", "--json", cwd=repo, env=env))
    assert "train" in status, status


def test_an_exported_cory_params_stops_a_stage_under_dvc_repro(smoke_repo, tmp_path):
    """A side experiment's $CORY_PARAMS left in the shell: `dvc repro` of the report stage stops it with one line,
    and nothing it writes (its metrics, dvc.lock) changes."""
    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["report"]["last_n"] = 3
    (repo / "side.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    headline, lock = (repo / "metrics/headline.json").read_bytes(), (repo / "dvc.lock").read_bytes()
    env = {**clean_env(), "CORY_PARAMS": str(repo / "side.yaml")}
    result = subprocess.run(["dvc", "repro", "-f", "-s", "report"], cwd=repo, capture_output=True, text=True, env=env)
    assert result.returncode != 0
    said = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error: ")]
    assert said == [f"error: $CORY_PARAMS names {repo / 'side.yaml'}, but DVC runs this stage and records "
                    "params.yaml's settings as the ones it ran with: `unset CORY_PARAMS` before `dvc repro` (a side "
                    f"experiment runs a stage outside DVC: `CORY_PARAMS={repo / 'side.yaml'} python -m "
                    "pipeline.<stage>`)"]
    assert (repo / "metrics/headline.json").read_bytes() == headline and (repo / "dvc.lock").read_bytes() == lock
