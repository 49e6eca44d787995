"""The smoke pipeline for the tests that run DVC itself: one `dvc repro` of the smoke profile per test session
(conftest.py's `smoke_repo`), shared by tests/test_pipeline_smoke.py and tests/test_dvc_views.py."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sh(*args: str, cwd: Path, env: dict | None = None) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


def clean_env(**extra: str) -> dict:
    """The environment of a DVC or stage subprocess: no telemetry, and none of this shell's params or MLflow store."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "MLFLOW_DISABLE_TELEMETRY": "true", **extra}
    for name in ("MLFLOW_TRACKING_URI", "CORY_PARAMS"):
        env.pop(name, None)
    return env


GIT = ("git", "-c", "user.name=ci", "-c", "user.email=ci@localhost")


def copy_tracked(repo: Path, profile: str = "default", commit: bool = True) -> Path:
    """The tracked files of this checkout, as they are in the working tree (the code under test), copied under
    `repo`, with params.yaml rendered from `profile` and dvc.lock as committed: whatever profile the working copy's
    params.yaml holds (the README's CPU path leaves the smoke one, and its repro a smoke dvc.lock), a test reads the
    profile it means and writes only under its own `repo`. With `commit`, a git repository of its own, committed."""
    from pipeline.profile import write

    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, files.stdout.split("\0")):
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    write(profile, repo / "params.yaml")
    lock = subprocess.run(["git", "show", "HEAD:dvc.lock"], cwd=ROOT, capture_output=True, text=True)
    if lock.returncode == 0:
        (repo / "dvc.lock").write_text(lock.stdout)
    if commit:
        sh("git", "init", "-q", cwd=repo)
        sh("git", "add", "-A", cwd=repo)
        sh(*GIT, "commit", "-qm", "snapshot", cwd=repo)
    return repo


def reproduce_smoke(repo: Path) -> Path:
    """A copy of the tracked files (as a fresh clone would have them) under `repo`, committed, switched to the smoke
    profile, reproduced (its log in repo/../repro.log), and its git-tracked results committed (so a `git clone` of it
    has them, as users get them)."""
    copy_tracked(repo, "default")
    env = clean_env(CORY_PIPELINE_RUN="smoke-test")
    git = list(GIT)
    sh(sys.executable, "-m", "pipeline.profile", "smoke", cwd=repo, env=env)
    # its log as a user's terminal-less capture holds it (stdout and stderr, in order), beside the copy
    log = subprocess.run(["dvc", "repro"], cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    (repo.parent / "repro.log").write_text(log.stdout)
    assert log.returncode == 0, f"dvc repro failed:\n{log.stdout[-8000:]}"
    sh("git", "add", "-A", cwd=repo)
    sh(*git, "commit", "-qm", "smoke results", cwd=repo)
    return repo
