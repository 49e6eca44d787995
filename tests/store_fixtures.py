"""An MLflow store for a test module and what the tracking tests read back from it: the `store` fixture (one SQLite
store per module) with `never_the_project_store` (autouse where imported: every run of the module logs there), a run
folder's config and samples, a run folder written as the train stage writes it, a profile's runs, the samples table
as the UI reads it, and the one-line MLflow warnings a stage prints."""

import json
from pathlib import Path

import pytest

from cory.tracking.runs import SAMPLES_TABLE

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402


PARAMS = {"seed": 3, "ppo": {"learning_rate": 1e-5, "generation": {"response_length": [4, 16]}}}
CONFIG = {**PARAMS, "iterations": 2}
"""A run folder's config.json: a train config has `iterations`."""


SAMPLES = [  # samples.jsonl of a 2-iteration CORY run (cory.rl.trainer): LLM1 alone, iterations 0 and 1, LLM1 alone
    {"iteration": -1, "query": "I liked", "pioneer_agent": "llm1", "pioneer_prompt": "I liked",
     "pioneer_response": " it", "pioneer_score": 0.5},
    {"iteration": 0, "query": "The film", "pioneer_agent": "llm1", "pioneer_prompt": "The film",
     "pioneer_response": " was bad", "pioneer_score": -1.0, "observer_agent": "llm2",
     "observer_prompt": "Better: The film was bad. The film", "observer_response": " was fine", "observer_score": 1.0},
    {"iteration": 1, "query": "Acting", "pioneer_agent": "llm2", "pioneer_prompt": "Acting",
     "pioneer_response": " good", "pioneer_score": 2.0, "observer_agent": "llm1",
     "observer_prompt": "Better: Acting good. Acting", "observer_response": " great", "observer_score": 3.0},
    {"iteration": 2, "query": "I liked", "pioneer_agent": "llm1", "pioneer_prompt": "I liked",
     "pioneer_response": " it a lot", "pioneer_score": 2.5},
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite store for the module: creating its tables takes a few seconds."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture(autouse=True)
def never_the_project_store(store, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)


def warnings_in(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("WARNING: MLflow")]


def runs_of(store, profile: str) -> list:
    client = MlflowClient(tracking_uri=store)
    return client.search_runs([client.get_experiment_by_name(f"cory-{profile}").experiment_id], order_by=["start_time"])


def read_table(client, run_id: str) -> dict[str, list]:
    """The samples table as the UI reads it: the artifact MLflow's loggedArtifacts tag points it to."""
    run = client.get_run(run_id)
    assert {"path": SAMPLES_TABLE, "type": "table"} in json.loads(run.data.tags["mlflow.loggedArtifacts"])
    return client.load_table(run.info.experiment_id, SAMPLES_TABLE, run_ids=[run_id]).to_dict("list")


def write_run_folder(runs_dir: Path, key: str, config: dict, finished: bool = True, final: dict | None = None) -> Path:
    folder = runs_dir / key
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "provenance.json").write_text(json.dumps(
        {"git_commit": "c0ffee" * 6 + "c0ff", "model": "/somewhere/outputs/default/models/imdb_small"}))
    (folder / "history.csv").write_text("iteration,llm1/kl,llm2/kl\n0,0.5,\n1,0.25,0.125\n")
    (folder / "samples.jsonl").write_text("".join(json.dumps(row) + "\n" for row in SAMPLES))
    if finished:
        summary = {"final": final or {"llm1/kl": 0.25}, "seed": 0, "algorithm": "cory"}
        (folder / "summary.json").write_text(json.dumps(summary))
    return folder
