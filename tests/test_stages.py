"""What a stage does before any work: a profile that needs a GPU stops at once on a machine without one, through
`dvc repro` as through the stage itself, and leaves every committed result as it was."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from smoke import copy_tracked


def tracked(repo: Path, under: str) -> dict[str, str]:
    files = subprocess.run(["git", "ls-files", under], cwd=repo, capture_output=True, text=True, check=True).stdout
    return {name: hashlib.md5((repo / name).read_bytes()).hexdigest() for name in files.split()}


@pytest.fixture(scope="module")
def default_repo(tmp_path_factory) -> Path:
    """A copy of the repository with the default profile in params.yaml, whatever the working copy holds: the stages
    below run there, so that nothing they might write lands in the working tree."""
    return copy_tracked(tmp_path_factory.mktemp("default") / "repo", "default", commit=False)


def test_dvc_repro_of_the_default_profile_without_a_gpu_stops_at_once_and_keeps_committed_results(tmp_path):
    repo = copy_tracked(tmp_path / "repo", "default")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DVC_NO_ANALYTICS": "1"}
    env.pop("CORY_PARAMS", None)
    before = tracked(repo, "outputs/default")
    assert len(before) > 10
    result = subprocess.run(["dvc", "repro"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    message = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(message) == 1 and "needs a CUDA GPU" in message[0], result.stderr[-2000:]
    assert "python -m pipeline.profile smoke" in message[0]
    assert tracked(repo, "outputs/default") == before  # nothing committed was deleted or overwritten
    assert not list((repo / "outputs/default").glob("data/*/prompts.jsonl"))  # and no work was done


def test_a_compute_stage_names_the_cpu_path_in_one_line(default_repo):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("CORY_PARAMS", None)  # the copy's params.yaml: the default profile
    result = subprocess.run([sys.executable, "-m", "pipeline.base_models", "math"], cwd=default_repo, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "runtime.device: the 'default' profile needs a CUDA GPU" in result.stderr


@pytest.mark.parametrize("stage", ["prepare_imdb", "prepare_math"])
def test_a_data_stage_checks_for_the_gpu_without_importing_torch(stage, default_repo):
    """The data stages never compute with torch, so their GPU check asks the NVIDIA driver (importing torch took 5.1 s
    on the GPU machine, 2026-12-02); the error is the compute stages' one line."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("CORY_PARAMS", None)
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", f"pipeline.{stage}"], cwd=default_repo, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert len(errors) == 1 and "needs a CUDA GPU and the NVIDIA driver sees none" in errors[0], errors
    imported = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "pipeline.common" in imported and not {"torch", "pandas"} & imported
