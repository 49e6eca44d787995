"""The README's experiment walk-through, run as written in a fresh copy of the repository: from the smoke run of the
quick start on the branch `main`, an experiment, its comparison, and back to `main` with a clean workspace; a failed
`dvc exp run` says what it changed, and the commands it names restore the last commit's state. And the smoke
repro's log, captured as in CI (not a terminal), reads top to bottom: no progress-bar frames, no expected warnings.

Marked smoke: they share conftest.py's one `dvc repro` of the smoke profile (tests/smoke.py)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from smoke import GIT, ROOT, clean_env, sh

pytestmark = pytest.mark.smoke


def walkthrough() -> list[str]:
    """The commands of README's walk-through block, one per line, comments dropped."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("On the smoke run of the\nquick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def bash(command: str, repo: Path, env: dict) -> subprocess.CompletedProcess:
    git_identity = " ".join(f"-c {option}" for option in GIT[2::2])  # a commit needs a name where git has none
    command = command.replace("git commit", f"git {git_identity} commit")
    return subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True)


def on_main_after_the_smoke_run(smoke_repo: Path, tmp_path: Path) -> Path:
    """A copy of the smoke repository as a user has it after the quick start's CPU command on a fresh clone: the
    branch `main` at the clone's commit, the smoke run in the workspace, uncommitted."""
    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    sh("git", "branch", "-M", "main", cwd=repo)
    sh("git", "reset", "-q", "HEAD~1", cwd=repo)  # the snapshot commit (default profile) with the smoke run on top
    return repo


def test_the_walkthrough_runs_as_written_and_goes_back_to_the_starting_branch(smoke_repo, tmp_path):
    repo, env = on_main_after_the_smoke_run(smoke_repo, tmp_path), clean_env()
    commands = walkthrough()
    assert commands[0].startswith("git switch -c try-smoke") and commands[-1].endswith("git switch main")
    outputs = []
    for command in commands:
        if command == commands[-1]:
            # DVC's checkouts during the experiment left git's previous branch the experiment's: `git switch -`
            # would not go back (what the README says instead of using it)
            assert sh("git", "rev-parse", "--abbrev-ref", "@{-1}", cwd=repo) != "main\n"
        result = bash(command, repo, env)
        assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        outputs.append(result.stdout)
    shown = dict(zip(commands, outputs))
    assert "learning_rate" in shown["dvc exp show --only-changed"]
    assert re.search(r"train\.ppo\.learning_rate\s+1\.41e-05\s+2e-05", shown["dvc exp diff try-smoke"])
    assert sh("git", "branch", "--show-current", cwd=repo) == "main\n"
    assert sh("git", "status", "--porcelain", cwd=repo) == ""
    assert "profile: default" in (repo / "params.yaml").read_text()
    assert sh("git", "log", "-1", "--format=%s", "try-smoke", cwd=repo) == "smoke run\n"


def test_a_failed_experiment_says_what_it_changed_and_its_commands_restore_the_commit(smoke_repo, tmp_path):
    """The smoke run committed (the walk-through's baseline): a -S typo fails in the params stage, a source that is
    not there in prepare_imdb, after DVC removed that stage's outputs and recorded the params stage in dvc.lock."""
    repo, env = tmp_path / "repo", clean_env()
    shutil.copytree(smoke_repo, repo, symlinks=True)
    typo = bash("dvc exp run -S +train.ppo.learning_rat=2e-5", repo, env)
    said = typo.stdout + typo.stderr
    assert typo.returncode != 0
    assert "train.ppo.learning_rat: unknown setting; did you mean 'learning_rate'?" in said
    assert "`git checkout params.yaml` takes them back" in said
    assert bash("git checkout params.yaml", repo, env).returncode == 0
    assert sh("git", "status", "--porcelain", cwd=repo) == ""

    missing = bash("dvc exp run -S data.imdb.source=./no_such_reviews.csv", repo, env)
    assert missing.returncode != 0
    said = missing.stdout + missing.stderr
    lines = [line for line in said.splitlines() if line.startswith("error: data.imdb.source")]
    assert len(lines) == 1, said[-3000:]
    restore = re.search(r"`(git checkout params\.yaml dvc\.lock && dvc checkout --force)`", lines[0])
    assert restore and "removed this stage's outputs" in lines[0], lines[0]
    assert not (repo / "outputs/smoke/data/imdb/prompts.jsonl").exists()  # what the message warns of
    assert sh("git", "status", "--porcelain", cwd=repo) != ""
    result = bash(restore.group(1), repo, env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sh("git", "status", "--porcelain", cwd=repo) == ""
    assert json.loads(sh("dvc", "status", "--json", cwd=repo, env=env)) == {}
    assert (repo / "outputs/smoke/data/imdb/prompts.jsonl").is_file()


def test_the_smoke_log_has_no_progress_bars_and_no_expected_warnings(smoke_repo):
    log = (smoke_repo.parent / "repro.log").read_text()
    lines = log.splitlines()
    assert "Running stage 'train'" in log and "Running stage 'report'" in log
    bars = [line for line in lines if re.search(r"\d+%\|", line) or "it/s]" in line]
    assert bars == [] and "\r" not in log, bars[:3]
    for expected in ("LOAD REPORT", "score.weight", "attention_mask"):
        assert expected not in log, expected
    assert "Traceback" not in log
