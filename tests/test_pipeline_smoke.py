"""The whole pipeline, for real: `dvc repro` of the smoke profile in a copy of the repository.

Runs every stage through its entry point on tiny models and data (a few minutes on 2 CPU cores), then checks that
every declared output exists, that `dvc status` has nothing left to do, and that MLflow lists every run with its
metric history.
"""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from smoke import clean_env, sh

pytestmark = pytest.mark.smoke


def declared_outputs(repo: Path) -> list[Path]:
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    paths = []
    for stage in lock["stages"].values():
        paths += [repo / out["path"] for out in stage.get("outs", [])]
    return paths


def test_every_declared_output_exists(smoke_repo):
    outputs = declared_outputs(smoke_repo)
    assert len(outputs) > 10
    missing = [str(p.relative_to(smoke_repo)) for p in outputs if not p.exists()]
    assert not missing, missing
    # each under the profile's folders, but DVC's views, at one path whatever the profile (cory.report.dvc_views)
    views = [p.relative_to(smoke_repo).as_posix() for p in outputs if p.relative_to(smoke_repo).parts[0] == "metrics"]
    assert sorted(views) == ["metrics/figures", "metrics/headline.json"]
    assert all("outputs/smoke" in str(p) or "reports/smoke" in str(p) for p in outputs
               if p.relative_to(smoke_repo).parts[0] != "metrics")


def test_dvc_status_has_nothing_to_do(smoke_repo):
    out = sh("dvc", "status", "--json", cwd=smoke_repo)
    assert json.loads(out) == {}, out


def test_every_run_wrote_history_summary_and_samples(smoke_repo):
    runs = sorted((smoke_repo / "outputs/smoke/runs").glob("*/*/seed0"))
    names = {f"{p.parent.parent.name}/{p.parent.name}" for p in runs}
    assert {"imdb/ppo", "imdb/ppo_2x", "imdb/cory", "imdb/cory_no_kt", "imdb/cory_no_rex", "imdb/cory_competitive",
            "math/ppo", "math/cory", "pareto/ppo_eta0.01", "pareto/cory_eta0.3"} <= names
    for run in runs:
        assert (run / "history.csv").read_text().count("\n") == 1 + 3  # header + 3 iterations
        summary = json.loads((run / "summary.json").read_text())
        assert "llm1/kl" in summary["final"]
        assert (run / "samples.jsonl").stat().st_size > 0
    # each group's final values: one file a group of the profile, a row a run x seed
    groups = yaml.safe_load((smoke_repo / "params.yaml").read_text())["experiments"]
    finals = smoke_repo / "outputs/smoke/metrics/train"
    assert sorted(p.stem for p in finals.glob("*.json")) == sorted(groups)
    rows = json.loads((finals / "imdb.json").read_text())
    assert "imdb/ppo/seed0" in rows and set(rows["imdb/cory/seed0"]) >= {"llm1/kl", "llm2/task_reward"}


def test_where_the_time_went_is_recorded(smoke_repo):
    """Each stage's clock (its process started before its timer, which started before it ended, and the stages one after
    another), each base model's parts inside its whole, each run's phases inside its wall time."""
    metrics = smoke_repo / "outputs/smoke/metrics"
    stages = sorted((json.loads(p.read_text()) for p in (metrics / "timing").glob("*.json")), key=lambda t: t["started_at"])
    assert {t["stage"] for t in stages} >= {"prepare_imdb", "base_models", "train", "evaluate", "report"}
    for before, stage in zip([None, *stages], stages):
        assert stage["process_started_at"] <= stage["started_at"] <= stage["finished_at"]
        assert before is None or before["finished_at"] <= stage["process_started_at"] + 0.2  # rounded to 0.1 s
    for path in (metrics / "base_models").glob("*.json"):
        model = json.loads(path.read_text())
        assert 0 <= model["process_start_seconds"] and model["total_seconds"] <= model["seconds"]
    reward = json.loads((metrics / "reward_model.json").read_text())  # trained in the base_models stage
    assert reward["total_seconds"] <= reward["seconds"]
    for path in (smoke_repo / "outputs/smoke/runs").glob("*/*/seed0/summary.json"):
        summary = json.loads(path.read_text())
        phases = summary["phase_seconds"]
        assert {"setup", "iterations", "save"} <= set(phases)
        assert sum(phases.values()) <= summary["wall_time_s"] + 0.1  # rounded to 0.01 s each
        # every run samples with kept decoders (generation.cache graph, the default profile's, which smoke keeps) of
        # at least cache_length tokens: one per agent serves the pioneer's, the observer's, the probes' and the logged
        # samples' prompts
        shapes = summary["decoding_shapes"]
        run = path.parts[-3]
        assert set(shapes) == ({"llm1"} if run.startswith("ppo") else {"llm1", "llm2"}), (path, shapes)
        assert all(len(kept) == 1 for kept in shapes.values()), (path, shapes)


def test_mlflow_lists_every_run_with_its_metric_history(smoke_repo):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{smoke_repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("cory-smoke")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    train_runs = [r for r in runs if r.data.tags.get("dvc_stage") == "train"]
    assert len(train_runs) == len(list((smoke_repo / "outputs/smoke/runs").glob("*/*/seed0")))
    for run in train_runs:
        history = client.get_metric_history(run.info.run_id, "llm1/task_reward")
        assert [m.step for m in history] == [0, 1, 2]
        assert run.data.tags["profile"] == "smoke" and run.data.tags["pipeline_run"] == "smoke-test"
    stages = {r.data.tags.get("dvc_stage") for r in runs}
    assert {"train", "evaluate", "reward_model"} <= stages


def test_report_and_figures_exist_and_the_report_judges_no_claim(smoke_repo):
    reports = smoke_repo / "reports/smoke"
    report = (reports / "REPORT.md").read_text()
    assert len(report) > 500
    assert len(list(reports.glob("*.png"))) >= 6
    # report.test_claims: false: said first, and no verdict (nor the rules of one) anywhere
    assert report.split("\n")[2].startswith("**This profile tests no claim of the paper**")
    assert "did not hold" not in report and "**held**" not in report and not re.search(r"\bheld\b(?!-out)", report)


def test_back_to_the_default_profile_the_workspace_is_clean(smoke_repo, tmp_path):
    """A user's smoke run on the default profile's commit: git ignores the smoke profile's folders and dvc_plots/,
    and the switch back restores what the run rewrote outside them (dvc.lock, metrics/)."""
    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    env = clean_env()
    sh("git", "reset", "-q", "HEAD~1", cwd=repo)  # the snapshot commit, with the smoke run in the workspace
    sh("dvc", "plots", "show", cwd=repo, env=env)
    dirty = sh("git", "status", "--porcelain", cwd=repo).splitlines()
    assert {line[3:].split("/")[0] for line in dirty} == {"dvc.lock", "params.yaml", "metrics"}, dirty
    out = sh(sys.executable, "-m", "pipeline.profile", "default", cwd=repo, env=env)
    assert "restored from the last commit" in out
    assert sh("git", "status", "--porcelain", cwd=repo) == ""


def test_weights_are_kept_apart_from_the_run_files(smoke_repo):
    outputs = smoke_repo / "outputs/smoke"
    assert not list((outputs / "runs").rglob("*.safetensors"))
    for seed_dir in ("math/ppo/seed0/llm1", "math/cory/seed0/llm1", "math/cory/seed0/llm2"):
        assert (outputs / "checkpoints" / seed_dir / "config.json").is_file()


def test_report_rebuilds_from_the_run_files_alone(smoke_repo, tmp_path):
    """A machine that got back only the small files (no weights) reruns the report stage with dvc.lock unchanged
    upstream: the GPU run's results can be re-reported without the GPU."""
    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    for heavy in ("outputs/smoke/checkpoints", "outputs/smoke/models", ".dvc/cache"):
        shutil.rmtree(repo / heavy)
    shutil.rmtree(repo / "reports/smoke")
    # a measurement kept beside the report (as reports/paper/scale.json is) survives the stage: its out persists
    (repo / "reports/smoke").mkdir()
    (repo / "reports/smoke/scale.json").write_text("{}\n")
    before = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    env = clean_env()
    sh("dvc", "repro", "--single-item", "report", cwd=repo, env=env)
    after = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    assert (repo / "reports/smoke/REPORT.md").stat().st_size > 500
    assert (repo / "reports/smoke/scale.json").read_text() == "{}\n"
    assert after["report"]["deps"] == before["report"]["deps"]
    assert {k: v for k, v in after.items() if k != "report"} == {k: v for k, v in before.items() if k != "report"}


def test_editing_an_output_leaves_the_cache_intact_and_dvc_status_notices(smoke_repo, tmp_path):
    """.dvc/config links outputs by reflink or copy: truncating an output (as root, where read-only bits do not
    stop it) must not truncate its cache object, and `dvc status` must report the change."""
    import hashlib

    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    env = clean_env()
    sh("dvc", "checkout", "--relink", "--force", cwd=repo, env=env)  # link the copy to its cache as configured
    prompts = repo / "outputs/smoke/data/imdb/prompts.jsonl"
    digest = hashlib.md5(prompts.read_bytes()).hexdigest()
    cached = repo / ".dvc/cache/files/md5" / digest[:2] / digest[2:]
    assert cached.is_file()
    prompts.write_text("")
    assert hashlib.md5(cached.read_bytes()).hexdigest() == digest  # the cache object is untouched
    status = json.loads(sh("dvc", "status", "--json", cwd=repo, env=env))
    assert "prepare_imdb" in status, status
    sh("dvc", "checkout", "--force", "outputs/smoke/data/imdb", cwd=repo, env=env)  # and it restores the original
    assert hashlib.md5(prompts.read_bytes()).hexdigest() == digest


def test_changing_one_runs_settings_retrains_that_run_only(smoke_repo, tmp_path):
    """Each RL run is its own cached unit: a new learning rate for math/ppo retrains math/ppo and keeps the other
    finished runs byte for byte (pipeline/train.py fingerprints; runs/ and checkpoints/ persist in dvc.yaml)."""
    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    env = clean_env()
    runs = repo / "outputs/smoke/runs"
    before = {p.parent.relative_to(runs): p.read_bytes() for p in runs.glob("*/*/seed0/summary.json")}
    profile = (repo / "profiles/smoke.yaml").read_text()  # edited as text: its !replace tags stay as they are
    math = "\n  math:\n    seeds: [0]\n"  # experiments.math
    assert profile.count(math) == 1
    lr = "    runs: {ppo: {train: {ppo: {learning_rate: 2.0e-5}}}}\n"
    (repo / "profiles/smoke.yaml").write_text(profile.replace(math, math + lr))
    sh(sys.executable, "-m", "pipeline.profile", "smoke", cwd=repo, env=env)
    gone = repo / "outputs/smoke/metrics/train/old_group.json"  # a group no longer in params
    gone.write_text("{}\n")
    out = sh("dvc", "repro", cwd=repo, env=env)
    assert f"[train] {len(before)} runs: {len(before) - 1} finished with the same fingerprint (kept), 0 to resume, " \
           "1 to train" in out, out[-3000:]
    after = {p.parent.relative_to(runs): p.read_bytes() for p in runs.glob("*/*/seed0/summary.json")}
    changed = sorted(str(k) for k in before if after[k] != before[k])
    assert changed == ["math/ppo/seed0"]
    assert not gone.exists()  # the stage owns the folder's files: a group gone from params goes from it too
    assert json.loads(sh("dvc", "status", "--json", cwd=repo, env=env)) == {}


def test_ray_executor_trains_the_same_runs(smoke_repo, tmp_path):
    """runtime.executor: ray sends each run to a Ray task (here a local Ray instance on the CPU, 2 at a time): the
    math group retrained that way writes the histories the local pool wrote, seed for seed."""
    import pandas as pd

    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    env = clean_env()
    env.pop("RAY_ADDRESS", None)
    runs = repo / "outputs/smoke/runs/math"
    histories = sorted(runs.glob("*/seed*/history.csv"))
    before = {p.relative_to(runs): pd.read_csv(p) for p in histories}
    shutil.rmtree(runs)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["runtime"].update(executor="ray", workers=2)
    (repo / "ray.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = sh(sys.executable, "-m", "pipeline.train", "math", cwd=repo, env={**env, "CORY_PARAMS": str(repo / "ray.yaml")})
    assert f"{len(before)} to train" in out, out[-3000:]
    for name, frame in before.items():
        again = pd.read_csv(runs / name)
        columns = [c for c in frame.columns if not c.startswith("timing/")]  # wall-clock times differ, nothing else
        pd.testing.assert_frame_equal(again[columns], frame[columns], check_exact=False, rtol=1e-6)
