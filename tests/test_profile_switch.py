"""Switching profiles leaves a clean workspace: after a run of another profile, `python -m pipeline.profile NAME`
restores dvc.lock and metrics/ (what that run rewrote outside its own folders) from the last commit when the commit
recorded a run of NAME (pipeline.profile.restore_committed), and leaves an uncommitted run of NAME alone."""

import subprocess

import yaml

from pipeline.profile import lock_profiles, restore_committed


def lock(*profiles: str) -> str:
    stages = {f"stage{i}": {"cmd": "x", "params": {"params.yaml": {"profile": p}}} for i, p in enumerate(profiles)}
    stages["params"] = {"cmd": "python -m pipeline.params", "params": {"params.yaml": {"profile": profiles[0]}}}
    return yaml.safe_dump({"schema": "2.0", "stages": stages})


def git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def committed_default_run(tmp_path):
    repo = tmp_path / "repo"
    (repo / "metrics" / "figures").mkdir(parents=True)
    (repo / "dvc.lock").write_text(lock("default", "default"))
    (repo / "metrics" / "headline.json").write_text('{"imdb": 1}\n')
    (repo / "metrics" / "figures" / "fig3_imdb.png").write_bytes(b"default")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "default run")
    return repo


def test_the_lock_names_the_profiles_of_its_stages():
    assert lock_profiles(lock("smoke", "smoke")) == {"smoke"}
    assert lock_profiles(lock("smoke", "default")) == {"smoke", "default"}  # a smoke run that stopped part way
    assert lock_profiles(None) == set() and lock_profiles("{not yaml") == set()


def test_back_to_the_committed_profile_restores_its_lock_and_views(tmp_path):
    repo = committed_default_run(tmp_path)
    (repo / "dvc.lock").write_text(lock("smoke", "default"))  # what a smoke run writes
    (repo / "metrics" / "headline.json").write_text('{"imdb": 2}\n')
    (repo / "metrics" / "figures" / "fig3_imdb.png").write_bytes(b"smoke")
    (repo / "metrics" / "figures" / "fig3_imdb_smollm2.png").write_bytes(b"smoke only")
    assert restore_committed("smoke", repo) is False  # the commit holds no smoke run: nothing to restore
    assert restore_committed("default", repo) is True
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / "metrics" / "figures" / "fig3_imdb.png").read_bytes() == b"default"


def test_an_uncommitted_run_of_the_same_profile_stays(tmp_path):
    repo = committed_default_run(tmp_path)
    (repo / "metrics" / "headline.json").write_text('{"imdb": 3}\n')  # a new default run, not committed yet
    (repo / "dvc.lock").write_text(lock("default", "default") + "# changed\n")
    assert restore_committed("default", repo) is False
    assert (repo / "metrics" / "headline.json").read_text() == '{"imdb": 3}\n'


def test_outside_a_git_checkout_nothing_happens(tmp_path):
    (tmp_path / "dvc.lock").write_text(lock("smoke"))
    assert restore_committed("default", tmp_path) is False
