import hashlib
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from cory.tracking.runs import SAMPLES_TABLE, FinishedRun, Tracker, log_finished, samples_table, start_run
from cory.tracking.store import store_exists, warm_up
from cory.tracking.tags import config_hash, flatten, main_module, run_identity

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

from store_fixtures import CONFIG, PARAMS, SAMPLES, read_table, runs_of, warnings_in  # noqa: E402
from store_fixtures import never_the_project_store, store  # noqa: E402, F401 (the store fixtures)



def test_flatten_gives_dotted_names():
    assert flatten(PARAMS) == {
        "seed": "3",
        "ppo.learning_rate": "1e-05",
        "ppo.generation.response_length": "[4, 16]",
    }


def test_config_hash_is_the_canonical_json_digest_whatever_the_key_order():
    config = {"seed": 3, "ppo": {"learning_rate": 1e-5, "response_length": (4, 16)}}
    reordered = {"ppo": {"response_length": [4, 16], "learning_rate": 1e-5}, "seed": 3}
    canonical = '{"ppo":{"learning_rate":1e-05,"response_length":[4,16]},"seed":3}'
    assert config_hash(config) == config_hash(reordered) == hashlib.sha256(canonical.encode()).hexdigest()[:12]
    assert config_hash(json.loads(json.dumps(config))) == config_hash(config)  # as read back from config.json
    assert config_hash({**config, "seed": 4}) != config_hash(config)


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


def test_finishing_a_run_flushes_the_metric_queue_instead_of_waiting_out_its_poll(store, tmp_path):
    """The run's end wakes MLflow's logging thread (its queue buffers, _client), so it does not wait a second for the
    thread's poll to time out; every metric still lands."""
    with start_run("train", PARAMS, profile="test-flush", outputs=tmp_path) as tracker:
        queue_store = tracker._client._tracking_client.store
        flushes = []
        original = queue_store.flush_async_logging
        queue_store.flush_async_logging = lambda: (flushes.append(1), original())[1]
        for step in range(20):
            tracker.log_metrics({"loss": float(step)}, step=step)
    assert os.environ["MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS"] == "1"
    assert flushes == [1]
    client = MlflowClient(tracking_uri=store)
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    assert [m.value for m in sorted(client.get_metric_history(tracker.run_id, "loss"), key=lambda m: m.step)] == [
        float(step) for step in range(20)]


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


def test_a_rerun_supersedes_every_older_run_of_its_key(store, tmp_path):
    def train(key):
        with start_run("train", PARAMS, profile="rerun", outputs=tmp_path, key=key) as tracker:
            pass
        return tracker.run_id

    first = train("imdb/ppo/seed0")
    other_seed = train("imdb/ppo/seed1")
    client = MlflowClient(tracking_uri=store)
    experiment_id = client.get_experiment_by_name("cory-rerun").experiment_id
    # a process killed without a word (SIGKILL, a lost machine) leaves its run RUNNING
    orphan = client.create_run(experiment_id, tags={"run_key": "rerun/imdb/ppo/seed0"}).info.run_id
    second = train("imdb/ppo/seed0")
    third = train("imdb/ppo/seed0")

    runs = {run.info.run_id: run for run in runs_of(store, "rerun")}
    tags = {run_id: run.data.tags for run_id, run in runs.items()}
    assert tags[first]["run_key"] == "rerun/imdb/ppo/seed0"
    assert tags[first]["superseded"] == tags[orphan]["superseded"] == tags[second]["superseded"] == "true"
    assert tags[first]["superseded_by"] == tags[orphan]["superseded_by"] == second  # not moved on by the third
    assert tags[second]["superseded_by"] == third
    assert tags[third]["superseded"] == tags[other_seed]["superseded"] == "false"
    assert runs[orphan].info.status == "KILLED"
    assert runs[first].info.status == runs[second].info.status == "FINISHED"


def test_the_filter_for_current_runs_finds_them(store, tmp_path):
    """MLflow's search leaves out a run without the tag on `tags.superseded != "true"` (the filter the README gives
    for the current runs): it found no run at all while only superseded runs had the tag (seen in the UI)."""
    def run(stage, key=None):
        with start_run(stage, PARAMS, profile="current", outputs=tmp_path, key=key) as tracker:
            pass
        return tracker.run_id

    old, new, other = run("train", "imdb/ppo/seed0"), run("train", "imdb/ppo/seed0"), run("train", "imdb/cory/seed0")
    old_evaluation, evaluation = run("evaluate"), run("evaluate")  # a stage's run is a run of the stage
    client = MlflowClient(tracking_uri=store)
    experiment_id = client.get_experiment_by_name("cory-current").experiment_id
    for query in ("tags.superseded != 'true'", "tags.superseded = 'false'"):
        assert {r.info.run_id for r in client.search_runs([experiment_id], query)} == {new, other, evaluation}
    superseded = {r.info.run_id for r in client.search_runs([experiment_id], "tags.superseded = 'true'")}
    assert superseded == {old, old_evaluation}
    assert client.get_run(evaluation).data.tags["run_key"] == "current/evaluate"


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, SystemExit])
def test_an_interrupted_body_ends_its_run_killed(interruption, store, tmp_path):
    with pytest.raises(interruption):
        with start_run("train", {}, profile="killed", outputs=tmp_path) as tracker:
            raise interruption
    assert MlflowClient(tracking_uri=store).get_run(tracker.run_id).info.status == "KILLED"


def test_sigterm_ends_the_run_killed_and_the_process_with_143(store, tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_:
        with start_run("train", {}, profile="killed", outputs=tmp_path) as tracker:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # the handler runs first, in this thread
    assert exit_.value.code == 128 + signal.SIGTERM
    assert MlflowClient(tracking_uri=store).get_run(tracker.run_id).info.status == "KILLED"
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_run_in_another_thread_leaves_signals_alone(store, tmp_path):
    """Only the main thread may set a signal handler: elsewhere trying would raise ValueError and break the stage."""
    trackers = []

    def body():
        with start_run("train", {}, profile="thread", outputs=tmp_path) as tracker:
            trackers.append(tracker)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    (tracker,) = trackers
    assert MlflowClient(tracking_uri=store).get_run(tracker.run_id).info.status == "FINISHED"


def test_source_commit_and_user_fill_the_columns_of_the_ui(store, tmp_path):
    with start_run("train", PARAMS, profile="source", outputs=tmp_path, source="pipeline.train") as tracker:
        pass
    with start_run("evaluate", {}, profile="source", outputs=tmp_path) as default:
        pass
    client = MlflowClient(tracking_uri=store)
    run = client.get_run(tracker.run_id)
    tags = run.data.tags
    assert tags["mlflow.source.name"] == "pipeline.train" and tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.source.git.commit"] == tags["git_commit"] and len(tags["git_commit"]) == 40
    assert tags["mlflow.user"] == run.info.user_id != "unknown"
    assert tags["config_hash"] == config_hash(PARAMS)
    assert client.get_run(default.run_id).data.tags["mlflow.source.name"] == main_module()


# --------------------------------------------------------------------------------------------------------------------
# Comparing runs in the UI: names, identity params, the samples table
# --------------------------------------------------------------------------------------------------------------------


def test_run_identity_names_group_run_task_and_model():
    assert run_identity("imdb/ppo_2x/seed1", "imdb", "/x/outputs/default/models/imdb_large") == {
        "group": "imdb", "run": "ppo_2x", "task": "imdb", "model": "imdb_large"}
    assert run_identity("math/cory/seed0", None, "gpt2-xl") == {"group": "math", "run": "cory", "model": "gpt2-xl"}


def test_a_training_run_shows_its_identity_as_params_and_its_samples_as_a_table(store, tmp_path):
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(row) + "\n" for row in SAMPLES))
    identity = run_identity("imdb/ppo_2x/seed3", "imdb", str(tmp_path / "models" / "imdb_large"))
    with start_run("train", CONFIG, run_name="imdb/ppo_2x/seed3", profile="compare", outputs=tmp_path, seed=3,
                   key="imdb/ppo_2x/seed3", identity=identity) as tracker:
        tracker.log_samples(samples, iterations=2)
    client = MlflowClient(tracking_uri=store)
    run = client.get_run(tracker.run_id)
    assert run.info.run_name == "imdb/ppo_2x/seed3"
    assert run.data.params == {**flatten(CONFIG), "group": "imdb", "run": "ppo_2x", "task": "imdb",
                               "model": "imdb_large"}
    assert run.data.params["ppo.learning_rate"] == "1e-05" and run.data.params["seed"] == "3"
    assert {name: run.data.tags[name] for name in identity} == identity
    assert run.data.tags["config_hash"] == config_hash(CONFIG)  # the identity is not config: config.json matches
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == [SAMPLES_TABLE]
    assert read_table(client, run.info.run_id) == samples_table(SAMPLES, iterations=2)


def test_a_finished_run_is_logged_as_its_work_went_live_with_its_times_metrics_and_artifacts(store, tmp_path):
    """A worker's unit, logged by the stage's process once it is done (log_finished), is the run start_run would
    have logged live: the same tags and params, its metrics step by step, started and ended when its work did; a
    newer run of the same key supersedes it."""
    artifact = tmp_path / "passk.json"
    artifact.write_text('{"base": 0.1}')
    run = FinishedRun("base_model@math", {"lm": {"n_layer": 2}}, str(tmp_path), 1_700_000_000.0, 1_700_000_090.5,
                      steps=[(0, {"loss": 3.0}), (10, {"loss": 2.0}), (10, {"seconds": 90.5})], artifacts=[str(artifact)])
    log_finished(run, "finished")
    client = MlflowClient(tracking_uri=store)
    (logged,) = client.search_runs([client.get_experiment_by_name("cory-finished").experiment_id])
    assert logged.info.run_name == "base_model@math" and logged.info.status == "FINISHED"
    assert (logged.info.start_time, logged.info.end_time) == (1_700_000_000_000, 1_700_000_090_500)
    assert logged.data.params["lm.n_layer"] == "2" and logged.data.tags["run_key"] == "finished/base_model@math"
    assert [(m.step, m.value) for m in client.get_metric_history(logged.info.run_id, "loss")] == [(0, 3.0), (10, 2.0)]
    assert logged.data.metrics["seconds"] == 90.5
    assert [a.path for a in client.list_artifacts(logged.info.run_id)] == ["passk.json"]
    log_finished(FinishedRun("base_model@math", {}, str(tmp_path), 1_700_000_100.0, 1_700_000_101.0, status="FAILED"),
                 "finished")
    runs = {r.info.run_id: r for r in client.search_runs([logged.info.experiment_id])}
    assert runs[logged.info.run_id].data.tags["superseded"] == "true" and len(runs) == 2
    assert {r.info.status for r in runs.values()} == {"FINISHED", "FAILED"}


def test_a_store_exists_once_mlflow_has_made_its_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'new.db'}")
    assert not store_exists()
    (tmp_path / "new.db").write_bytes(b"")  # a file, but no tables: MLflow would create them
    assert not store_exists()
    (tmp_path / "new.db").unlink()
    log_finished(FinishedRun("evaluate", {}, str(tmp_path), time.time(), time.time()), "exists")
    assert store_exists()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://localhost:1")  # a server creates its own
    assert store_exists()


def test_a_warm_up_in_a_thread_opens_the_store_and_the_next_client_waits_for_it(tmp_path, monkeypatch):
    from cory.tracking import store as tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'warm.db'}")
    monkeypatch.setattr(tracking, "_WARMING", None)
    opened = []
    real_open_store = tracking.open_store

    def slow_open_store(profile):
        time.sleep(1.0)
        real_open_store(profile)
        opened.append(threading.current_thread().name)

    monkeypatch.setattr(tracking, "open_store", slow_open_store)
    warm_up("warm")
    warm_up("warm")  # once per process
    assert not opened
    log_finished(FinishedRun("evaluate", {}, str(tmp_path), time.time(), time.time()), "warm")
    assert opened == ["mlflow-warm-up"]  # the log waited for the thread, which had opened the store
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'warm.db'}")
    assert len(client.search_runs([client.get_experiment_by_name("cory-warm").experiment_id])) == 1
def test_an_experiments_parent_run_is_named_by_what_it_changed():
    """`dvc exp run -S train.ppo.learning_rate=2e-5` logs a parent run its baseline's name does not share."""
    from cory.report.pipeline_run import run_name
    from pipeline.profile import changed_settings, render

    params = render("default")
    commit = "0123456789abcdef0123456789abcdef01234567"
    assert changed_settings(params) == {} and run_name("default", commit, {}) == "default 0123456"
    params["train"]["ppo"]["learning_rate"] = 2e-5
    changed = changed_settings(params)
    assert changed == {"train.ppo.learning_rate": 2e-5}
    assert run_name("default", commit, changed) == "default 0123456 learning_rate=2e-05"
    # short enough for the runs table: the settings that fit, then how many more (the tag `changed` has them all)
    params["train"]["ppo"]["init_kl_coef"] = 0.1
    params["report"]["last_n"] = 5
    name = run_name("default", commit, changed_settings(params))
    assert name == "default 0123456 last_n=5 +2"
    assert run_name("smoke", "smoke-test", {}) == "smoke smoke-test"  # $CORY_PIPELINE_RUN, no commit: as it is


def test_an_experiment_is_created_as_a_model_training_one(store):
    """MLflow 3 opens an experiment of kind custom_model_development on its runs table, not on GenAI traces."""
    from mlflow.tracking import MlflowClient

    from cory.tracking.store import experiment_of

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment(experiment_of(client, "kind"))
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_a_temp_experiments_runs_go_to_the_repositorys_store():
    """`dvc exp run --temp` runs the stages in <repository>/.dvc/tmp/exps/<...>/, deleted afterwards: the default
    store is the repository's."""
    from pathlib import Path

    from cory.tracking.store import store_root

    assert store_root(Path("/r/.dvc/tmp/exps/standalone/tmp1a2b")) == Path("/r")
    assert store_root(Path("/r/project")) == Path("/r/project")
