"""Run folders DVC restored (or `dvc pull` fetched) are logged to MLflow as the finished runs they record
(cory.tracking.restore.sync_runs), once, and a run of another config is replaced."""

import json

from mlflow.tracking import MlflowClient

from cory.tracking.restore import read_history, sync_runs
from cory.tracking.runs import samples_table, start_run
from cory.tracking.tags import config_hash, flatten, run_identity
from store_fixtures import CONFIG, SAMPLES, read_table, runs_of, warnings_in, write_run_folder
from store_fixtures import never_the_project_store, store  # noqa: F401 (the store fixtures, for these tests too)


def test_read_history_takes_iteration_as_the_step_and_skips_empty_cells(tmp_path):
    folder = write_run_folder(tmp_path, "g/r/seed0", {})
    assert read_history(folder / "history.csv") == [
        (0, {"iteration": 0.0, "llm1/kl": 0.5}),
        (1, {"iteration": 1.0, "llm1/kl": 0.25, "llm2/kl": 0.125}),
    ]


def test_sync_runs_logs_a_restored_run_once(store, tmp_path, capsys):
    runs_dir = tmp_path / "runs"
    write_run_folder(runs_dir, "imdb/cory/seed0", CONFIG)
    write_run_folder(runs_dir, "imdb/cory/seed1", CONFIG, finished=False)  # killed mid-run: not a result
    assert sync_runs(runs_dir, "sync", {"imdb": "imdb"}) == ["imdb/cory/seed0"]
    assert sync_runs(runs_dir, "sync", {"imdb": "imdb"}) == []
    assert warnings_in(capsys) == []

    (run,) = runs_of(store, "sync")
    tags = run.data.tags
    assert run.info.status == "FINISHED" and run.info.run_name == "imdb/cory/seed0"
    assert tags["restored_from"] == "dvc" and tags["run_key"] == "sync/imdb/cory/seed0"
    assert tags["config_hash"] == config_hash(CONFIG) and tags["dvc_stage"] == "train"
    assert tags["group"] == "imdb" and tags["run"] == "cory" and tags["seed"] == "0" and tags["algorithm"] == "cory"
    assert tags["git_commit"] == tags["mlflow.source.git.commit"] == "c0ffee" * 6 + "c0ff"
    assert tags["mlflow.source.name"] == "pipeline.train"
    assert tags["task"] == "imdb" and tags["model"] == "imdb_small"
    assert run.data.params == {**flatten(CONFIG), "group": "imdb", "run": "cory", "task": "imdb", "model": "imdb_small"}
    client = MlflowClient(tracking_uri=store)
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "llm1/kl")] == [(0, 0.5), (1, 0.25)]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "llm2/kl")] == [(1, 0.125)]
    assert read_table(client, run.info.run_id) == samples_table(SAMPLES, iterations=2)


def test_sync_runs_keeps_a_trained_run_and_replaces_one_of_another_config(store, tmp_path):
    runs_dir = tmp_path / "runs"
    with start_run("train", CONFIG, profile="resync", outputs=tmp_path, key="math/ppo/seed0",
                   identity=run_identity("math/ppo/seed0", "math")) as trained:
        pass
    write_run_folder(runs_dir, "math/ppo/seed0", CONFIG)
    assert sync_runs(runs_dir, "resync") == []  # trained here: already listed (its identity is not in config_hash)

    (runs_dir / "math/ppo/seed0/config.json").write_text(json.dumps({**CONFIG, "seed": 4}))  # e.g. `dvc checkout`
    assert sync_runs(runs_dir, "resync") == ["math/ppo/seed0"]
    old, restored = runs_of(store, "resync")
    assert old.info.run_id == trained.run_id and old.data.tags["superseded_by"] == restored.info.run_id
    assert restored.data.tags["config_hash"] == config_hash({**CONFIG, "seed": 4})


def test_sync_runs_with_an_unusable_store_warns_once(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://nowhere")
    write_run_folder(tmp_path, "imdb/ppo/seed0", CONFIG)
    write_run_folder(tmp_path, "imdb/ppo/seed1", CONFIG)
    assert sync_runs(tmp_path, "test") == []
    (warning,) = warnings_in(capsys)
    assert "sync_runs failed" in warning
