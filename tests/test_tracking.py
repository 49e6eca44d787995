import json
import socket
import sys
from pathlib import Path

import pytest

from cory.tracking import Tracker, flatten, start_run

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

PARAMS = {"seed": 3, "ppo": {"learning_rate": 1e-5, "generation": {"response_length": [4, 16]}}}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite store for the module: creating its tables takes a few seconds."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture(autouse=True)
def never_the_project_store(store, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)


def warnings_in(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("WARNING: MLflow")]


def test_flatten_gives_dotted_names():
    assert flatten(PARAMS) == {
        "seed": "3",
        "ppo.learning_rate": "1e-05",
        "ppo.generation.response_length": "[4, 16]",
    }


def test_run_in_a_real_sqlite_store(store, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CORY_PIPELINE_RUN", "repro-42")
    artifact = tmp_path / "passk.json"
    artifact.write_text("{}")
    with start_run(
        "train", PARAMS, tags={"task": "imdb"}, run_name="cory-seed3", profile="test", outputs=tmp_path,
        seed=3, algorithm="cory",
    ) as tracker:  # fmt: skip
        for step in range(3):
            tracker.log_metrics({"llm1/kl": 0.5 * step, "timing/iteration": 1.0, "llm2/kl": None}, step=step)
        tracker.log_dict({"a": 1}, "config.json")
        tracker.log_artifact(artifact)
    assert warnings_in(capsys) == []

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("cory-test")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == tracker.run_id
    assert run.info.run_name == "cory-seed3" and run.info.status == "FINISHED"
    assert run.data.params == flatten(PARAMS)
    tags = run.data.tags
    assert tags["dvc_stage"] == "train" and tags["profile"] == "test" and tags["pipeline_run"] == "repro-42"
    assert tags["seed"] == "3" and tags["algorithm"] == "cory" and tags["task"] == "imdb"
    assert len(tags["git_commit"]) == 40 or tags["git_commit"] == "unknown"
    history = client.get_metric_history(run.info.run_id, "llm1/kl")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.0), (1, 0.5), (2, 1.0)]
    assert client.get_metric_history(run.info.run_id, "llm2/kl") == []
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["config.json", "passk.json"]
    assert experiment.artifact_location == (Path(store.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
    local = client.download_artifacts(run.info.run_id, "config.json", str(tmp_path))
    assert json.loads(open(local).read()) == {"a": 1}


def test_a_failing_stage_marks_its_run_failed_and_still_raises(store, tmp_path):
    with pytest.raises(ZeroDivisionError):
        with start_run("evaluate", {}, profile="failing", outputs=tmp_path) as tracker:
            1 / 0
    client = MlflowClient(tracking_uri=store)
    assert client.get_run(tracker.run_id).info.status == "FAILED"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("kind", ["bad scheme", "unopenable sqlite", "unreachable server"])
def test_unusable_store_warns_once_and_never_raises(kind, monkeypatch, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    uri = {
        "bad scheme": "nosuchscheme://nowhere",
        "unopenable sqlite": f"sqlite:///{blocker / 'mlflow.db'}",  # its folder is a file
        "unreachable server": f"http://127.0.0.1:{closed_port()}",
    }[kind]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with start_run("train", PARAMS, profile="test", outputs=tmp_path / "outs") as tracker:
        tracker.log_metrics({"llm1/kl": 1.0}, step=0)
        tracker.log_dict({"a": 1}, "a.json")
        tracker.log_artifact(blocker)
    (warning,) = warnings_in(capsys)
    assert warning.startswith("WARNING: MLflow unavailable (") and warning.endswith(f"written to {tmp_path / 'outs'}")
    assert not tracker.active


def test_missing_mlflow_warns_once(monkeypatch, tmp_path, capsys):
    for name in [name for name in sys.modules if name.split(".")[0] == "mlflow"] + ["mlflow"]:
        monkeypatch.setitem(sys.modules, name, None)  # makes `import mlflow...` raise ImportError
    with start_run("train", PARAMS, profile="test", outputs=tmp_path) as tracker:
        tracker.log_metrics({"llm1/kl": 1.0}, step=0)
    (warning,) = warnings_in(capsys)
    assert "mlflow is not installed" in warning


class BrokenClient:
    """A store that accepts the run, then fails on every write (e.g. a server that went away mid-run)."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise ConnectionError("server went away")

        return fail


def test_error_mid_run_warns_once_then_stops_logging(tmp_path, capsys):
    tracker = Tracker(BrokenClient(), "run-id", tmp_path)
    tracker.log_metrics({"llm1/kl": 1.0}, step=0)
    tracker.log_metrics({"llm1/kl": 1.0}, step=1)
    tracker.finish("FINISHED")
    (warning,) = warnings_in(capsys)
    assert "log_metrics failed: server went away" in warning
