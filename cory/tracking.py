"""MLflow tracking that never breaks a stage.

The files each DVC stage writes are the record of a run; MLflow is a convenience view over them (runs of one profile
side by side in one experiment). So every MLflow problem (not installed, as on the GPU machine; a store that cannot
be opened or reached; an error mid-run) prints ONE warning line and turns the tracker into a no-op.

Store: $MLFLOW_TRACKING_URI, else `sqlite:///<project root>/mlflow.db` (MLflow 3 refuses the old ./mlruns file
store); a SQLite store keeps its artifacts in `mlartifacts/` next to its file. Experiment: `cory-<profile>`. Every
run is tagged with its DVC stage, profile, git commit, `pipeline_run` ($CORY_PIPELINE_RUN, else the commit: one
`dvc repro` shares one id), `config_hash` (of its resolved params), MLflow's own source, commit and user tags (the
UI's Source, Version and User columns), and, for training runs, seed and algorithm. Metrics are sent asynchronously,
one batch per step, so logging never waits on the store inside a training loop.

MLflow mirrors DVC, which keeps one output per run and replaces it when the run is redone:
- Every run has a key, what it is a run of: a training run's "<group>/<run>/seed<k>", the parent run's "pipeline",
  any other stage's run name (base_model@math, reward_model, evaluate). It is tagged `run_key` = "<profile>/<key>".
  A new run of a key never reuses an old one, even with the same config_hash (DVC ran the code again, so it is a new
  run): every older run of the key is tagged `superseded=true` and `superseded_by=<new run id>`, and one still RUNNING
  (its process is gone) ends KILLED. Every run starts tagged `superseded=false`, so the UI's search
  `tags.superseded != "true"` (or `= "false"`) lists the current runs only.
- A run ends FINISHED; KILLED if its body is interrupted (Ctrl-C, SystemExit, or SIGTERM, which start_run turns into
  SystemExit so that the run can still be closed); FAILED on any other exception.
- A stage's worker processes that train one unit each (base_models) import no MLflow: each hands its unit's run
  (FinishedRun) back, and the stage's own process logs it once the unit is done (log_finished), started and ended
  when its work did; the evaluate stage logs its run once the models are evaluated. Where worker processes do the
  work, the stage's process imports MLflow and opens the store meanwhile (warm_up).
- Results DVC restores from its cache (or `dvc pull`s) ran no code, so sync_runs, called by the report stage, logs a
  run tagged `restored_from=dvc` (params from config.json, metric history from history.csv) for every run folder
  whose current run is missing, unfinished or of another config_hash.

For comparing runs in the UI, a training run is named "<group>/<run>/seed<k>"; its params are its resolved train
config flattened (`ppo.learning_rate`, `cory.n_agents`, `seed`, ...) plus what it is a run of, `group`, `run`, `task`
and `model` (run_identity: PPO-2x differs from PPO by its model alone); its generations are the table artifact
`samples.json` (one row per generation: iteration, phase, agent, role, query, response, score, prompt). The report
stage ends with one parent run per `dvc repro` (log_pipeline_run): the headline numbers as metrics and as its
description, each claim's verdict, reports/<profile>/ as artifacts, and the runs the report is made of nested under it.
"""

from __future__ import annotations

import contextlib
import csv
import getpass
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The checkout this library runs from (it is installed editable); the default store lives here."""

RUN_FILES = ("config.json", "history.csv", "summary.json")
"""The files of a finished training run folder that sync_runs reads (summary.json is written last)."""
SAMPLES_TABLE = "samples.json"
"""A training run's generations as an MLflow table artifact (samples_table), shown by the UI's artifact viewer."""
PIPELINE_KEY = "pipeline"
"""run_key (after "<profile>/") of the parent run of one `dvc repro`: the newest supersedes the older ones."""


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{PROJECT_ROOT / 'mlflow.db'}"


def git_commit() -> str:
    """HEAD of the project checkout, or "unknown" outside a git repository."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def provenance(device: str) -> dict[str, Any]:
    """Where an output came from: device, package versions and git commit (written next to every model and run)."""
    import torch
    import transformers

    return {
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else device,
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__},
        "git_commit": git_commit(),
    }


def pipeline_run_id(commit: str) -> str:
    """What one `dvc repro` shares: $CORY_PIPELINE_RUN, else the git commit."""
    return os.environ.get("CORY_PIPELINE_RUN") or commit


def run_identity(key: str, task: str | None = None, model: str | None = None) -> dict[str, str]:
    """What a training run is a run of, logged as params beside its config and as tags: its group and run (from its
    key "<group>/<run>/seed<k>"), its task (the name its group's `task` gives) and its base model (a local folder by
    its name, e.g. imdb_large; a hub name as it is). The config alone does not tell PPO-2x from PPO: the model does."""
    group, run, _ = key.split("/")
    if model is not None and Path(model).is_absolute():
        model = Path(model).name
    identity = {"group": group, "run": run, "task": task, "model": model}
    return {name: value for name, value in identity.items() if value is not None}


def samples_table(rows: list[dict[str, Any]], iterations: int) -> dict[str, list]:
    """samples.jsonl (cory.trainer: one row per query, with <role>_agent/_prompt/_response/_score per role) as one
    row per generation, the shape the UI filters and compares across runs. Columns: iteration; phase ("before
    training": LLM1 alone at iteration -1, "training", "after training": LLM1 alone at iteration `iterations`); agent
    (llm1, llm2); role (pioneer, observer; "alone" before and after training); query; response; score; prompt (the
    observer's holds the pioneer's response)."""
    table: dict[str, list] = {name: [] for name in
                              ("iteration", "phase", "agent", "role", "query", "response", "score", "prompt")}
    for row in rows:
        iteration = int(row["iteration"])
        phase = "before training" if iteration < 0 else "after training" if iteration >= iterations else "training"
        for role in ("pioneer", "observer"):
            if f"{role}_response" not in row:
                continue
            values = (iteration, phase, row[f"{role}_agent"], role if phase == "training" else "alone", row["query"],
                      row[f"{role}_response"], row[f"{role}_score"], row[f"{role}_prompt"])
            for column, value in zip(table.values(), values):
                column.append(value)
    return table


def flatten(params: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """{"ppo": {"learning_rate": 1e-5}} -> {"ppo.learning_rate": "1e-05"} (lists as JSON)."""
    flat = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            flat[name] = json.dumps(list(value))
        else:
            flat[name] = str(value)
    return flat


def config_hash(config: dict[str, Any]) -> str:
    """The first 12 hex digits of the sha256 of `config` as canonical JSON (keys sorted, tuples as lists).

    The same resolved config gives the same hash in the process that trains and after a JSON round trip through
    the run's config.json, so a run folder DVC restored can be matched to the MLflow run that produced it."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def main_module() -> str:
    """The module this process runs: "pipeline.train" for `python -m pipeline.train` (and in the workers it spawns,
    which re-import it by that name), else the script's file name."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec is not None else Path(sys.argv[0]).name


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name, e.g. a container's uid without a passwd entry
        return "unknown"


def run_tags(
    stage: str, profile: str, params: dict[str, Any], *, commit: str, source: str, key: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Every tag of a run. The `mlflow.*` ones are MLflow's system tags (mlflow.utils.mlflow_tags), which its UI
    shows as the Source, Version and User columns; they are set by hand because MlflowClient, unlike mlflow.start_run,
    fills none of them. `superseded` starts "false" (a newer run of its key sets it "true"): MLflow's search skips
    a run without the tag on `tags.superseded != "true"`, so without it that filter would show no run at all."""
    tags = {
        "superseded": "false",
        "dvc_stage": stage,
        "profile": profile,
        "git_commit": commit,
        "pipeline_run": pipeline_run_id(commit),
        "config_hash": config_hash(params),
        "mlflow.source.name": source,
        "mlflow.source.type": "LOCAL",
        "mlflow.user": _user(),
        **({"mlflow.source.git.commit": commit} if commit != "unknown" else {}),
        **({"run_key": f"{profile}/{key}"} if key is not None else {}),
        **(extra or {}),
    }
    return {name: str(value) for name, value in tags.items()}


def _check_reachable(uri: str) -> None:
    """Fail fast on a tracking server that does not answer: MLflow itself retries for minutes before giving up."""
    if uri.startswith(("http://", "https://")):
        try:
            urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=5).close()
        except urllib.error.HTTPError:
            pass  # the server answered (e.g. 401 behind auth): it is reachable
        except (urllib.error.URLError, OSError) as exc:
            raise ConnectionError(f"cannot reach {uri}: {getattr(exc, 'reason', exc)}") from None


def _artifact_location(uri: str) -> str | None:
    """Artifacts of a local SQLite store go next to its file (MLflow's default, ./mlruns, depends on the cwd);
    a tracking server decides for itself."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts").as_uri()
    return None


def _warn(reason: Any, outputs: str | Path) -> None:
    reason = " ".join(str(reason).split())[:300]
    print(f"WARNING: MLflow unavailable ({reason}): outputs are still written to {outputs}", file=sys.stderr)


class Tracker:
    """Logs to one MLflow run; after the first failure (or without MLflow) every method does nothing."""

    def __init__(self, client, run_id: str | None, outputs: str | Path):
        self._client = client
        self.run_id = run_id
        self._outputs = outputs
        self._warned = False
        self._pending = []  # asynchronous log operations, waited for at the end of the run

    @property
    def active(self) -> bool:
        return self._client is not None

    def disable(self, reason: str) -> None:
        """Print the one warning line (once per run) and stop logging."""
        if not self._warned:
            _warn(reason, self._outputs)
            self._warned = True
        self._client = None

    def _call(self, what: str, fn):
        if self._client is None:
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - tracking must never break a stage
            self.disable(f"{what} failed: {exc}")
            return None

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Log one step's metrics in one batch, without waiting for the store (None values are skipped)."""

        def send():
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            batch = [Metric(key, float(value), now, step) for key, value in metrics.items() if value is not None]
            return self._client.log_batch(self.run_id, metrics=batch, synchronous=False)

        op = self._call("log_metrics", send)
        if op is not None:
            self._pending.append(op)

    def log_params(self, params: dict[str, Any]) -> None:
        """Log (nested) params flattened to dotted names."""

        def send():
            from mlflow.entities import Param

            batch = [Param(key, value) for key, value in flatten(params).items()]
            self._client.log_batch(self.run_id, params=batch)

        self._call("log_params", send)

    def log_artifact(self, path: str | Path) -> None:
        self._call("log_artifact", lambda: self._client.log_artifact(self.run_id, str(path)))

    def log_artifacts(self, folder: str | Path, artifact_path: str | None = None) -> None:
        self._call("log_artifacts", lambda: self._client.log_artifacts(self.run_id, str(folder), artifact_path))

    def log_samples(self, path: str | Path, iterations: int) -> None:
        """Log a run's samples.jsonl as the table SAMPLES_TABLE (see samples_table)."""
        self._call("log_samples", lambda: _log_samples(self._client, self.run_id, Path(path), iterations))

    def log_dict(self, dictionary: dict[str, Any], artifact_file: str) -> None:
        self._call("log_dict", lambda: self._client.log_dict(self.run_id, dictionary, artifact_file))

    def finish(self, status: str, ended_at: float | None = None) -> None:
        """Wait for pending metrics, then end the run with `status` (FINISHED, FAILED or KILLED), at `ended_at`
        (Unix seconds; default now)."""
        if self._pending:
            self._call("log_metrics", self._flush)
        for op in self._pending:
            self._call("log_metrics", op.wait)
        self._pending.clear()
        end = None if ended_at is None else int(ended_at * 1000)
        self._call("end run", lambda: self._client.set_terminated(self.run_id, status, end_time=end))

    def _flush(self) -> None:
        """Send the queued metrics now. MLflow's logging thread otherwise notices the end of a run only when its
        wait for more (one second) times out: one second at the end of every run and stage. With the queue's
        buffering on (_client), a flush wakes it at once. The store's queue is not public API: where it is not
        there, the pending operations are waited for as they are."""
        store = getattr(getattr(self._client, "_tracking_client", None), "store", None)
        if hasattr(store, "flush_async_logging"):
            store.flush_async_logging()


_WARMING: threading.Thread | None = None
"""A warm_up of this process in progress, which the next client waits for."""


def warm_up(profile: str) -> None:
    """Import MLflow and open the store (open_store) in a thread of this process while its main thread waits for work
    done elsewhere (the stage's worker processes): MLflow's import and the store's first opening are seconds of a
    stage's start on the GPU machine (mlflow 3.17: 2.2 s on this repository's CPU machine), which the runs logged
    afterwards by this process (log_finished) then find done. Only where the main thread imports nothing meanwhile:
    two threads importing at once can meet in a circular import. The next client of this process waits for it."""
    global _WARMING
    if _WARMING is None:
        # not a daemon: a process ending meanwhile waits for it rather than cut a new store's creation short
        _WARMING = threading.Thread(target=open_store, args=(profile,), name="mlflow-warm-up")
        _WARMING.start()


def _client():
    if _WARMING is not None and _WARMING is not threading.current_thread():
        _WARMING.join()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # the logging thread collects a second's metrics into one write (fewer SQLite transactions from the processes
    # that log at once) and, waiting on an event rather than on the queue, wakes at once when a run is flushed
    os.environ.setdefault("MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS", "1")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise RuntimeError("mlflow is not installed") from None
    uri = tracking_uri()
    _check_reachable(uri)
    return MlflowClient(tracking_uri=uri)


def open_store(profile: str) -> None:
    """Create (or migrate) the tracking store and the profile's experiment now, in a stage's own process, before it
    starts processes that log runs at the same time: MLflow's first use of a new SQLite store creates and migrates its
    tables, and three processes doing that at once raced (seen on an H100: two of three base models logged no run,
    "Online migration expected to match one row"). Errors are left to start_run to report; tracking never breaks a
    stage."""
    try:
        _experiment_id(_client(), profile)
    except Exception:  # noqa: BLE001, S110 - start_run says what is wrong, per run
        pass


def store_exists() -> bool:
    """Whether the tracking store needs no creating: a SQLite store whose file holds MLflow's tables (read with the
    standard library, without importing MLflow), or any other store (a server creates its own). MLflow creates the
    tables of an empty SQLite store as it opens it, and only then: processes opening an existing one at once do not
    race (an out-of-date one each refuses with the same error, `mlflow db upgrade`)."""
    import sqlite3

    uri = tracking_uri()
    if not uri.startswith("sqlite:///"):
        return True
    path = Path(uri.removeprefix("sqlite:///"))
    if not path.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return db.execute("SELECT 1 FROM sqlite_master WHERE name = 'alembic_version'").fetchone() is not None
    except sqlite3.Error:
        return False


def _experiment_id(client, profile: str) -> str:
    from mlflow.exceptions import MlflowException

    name = f"cory-{profile}"
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            client.create_experiment(name, artifact_location=_artifact_location(tracking_uri()))
        except MlflowException:
            pass  # another stage created it meanwhile
        experiment = client.get_experiment_by_name(name)
    return experiment.experiment_id


def _runs_of(client, experiment_id: str, run_key: str) -> list:
    return client.search_runs([experiment_id], f"tags.run_key = '{run_key}'", max_results=1000)


def _create_run(client, experiment_id: str, run_name: str, tags: dict[str, str], start_time: int | None = None) -> str:
    """A new run (started at `start_time`, Unix ms; default now); the older runs of its run_key (if it has one) are
    superseded by it."""
    from mlflow.entities import RunTag

    run_id = client.create_run(experiment_id, start_time=start_time, run_name=run_name, tags=tags).info.run_id
    if "run_key" not in tags:
        return run_id
    for old in _runs_of(client, experiment_id, tags["run_key"]):
        if old.info.run_id == run_id or old.data.tags.get("superseded") == "true":
            continue
        client.log_batch(old.info.run_id, tags=[RunTag("superseded", "true"), RunTag("superseded_by", run_id)])
        if old.info.status == "RUNNING":
            client.set_terminated(old.info.run_id, "KILLED")
    return run_id


def _raise_system_exit(signum, frame) -> None:
    raise SystemExit(128 + signum)  # the exit status a shell reports for a process killed by this signal


@contextlib.contextmanager
def _sigterm_raises_system_exit() -> Iterator[None]:
    """SIGTERM (`kill`, a scheduler, a process pool shutting down) ends Python without unwinding the stack, which
    would leave the run RUNNING forever; as SystemExit it unwinds through start_run, which ends the run KILLED.
    Python only lets the main thread set signal handlers; elsewhere SIGTERM keeps whatever it does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_system_exit)
    try:
        yield
    finally:
        # None: a handler not set from Python; the default is the closest Python can restore.
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _open_run(
    stage: str, params: dict[str, Any], tags: dict[str, Any] | None, run_name: str | None, *, profile: str,
    outputs: str | Path, seed: int | None = None, algorithm: str | None = None, key: str | None = None,
    source: str | None = None, identity: dict[str, str] | None = None, started_at: float | None = None,
) -> Tracker:
    """A new run with its tags and params (start_run's arguments), or a disabled tracker that has said why."""
    key = key if key is not None else run_name or stage  # DVC keeps one output per stage: its last run is current
    extra = {
        **({"seed": seed} if seed is not None else {}),
        **({"algorithm": algorithm} if algorithm is not None else {}),
        **(identity or {}),
        **(tags or {}),
    }
    tracker = Tracker(None, None, outputs)
    try:
        all_tags = run_tags(stage, profile, params, commit=git_commit(), source=source or main_module(), key=key,
                            extra=extra)
        client = _client()
        start = None if started_at is None else int(started_at * 1000)
        run_id = _create_run(client, _experiment_id(client, profile), run_name or stage, all_tags, start)
        tracker = Tracker(client, run_id, outputs)
    except Exception as exc:  # noqa: BLE001 - tracking must never break a stage
        tracker.disable(exc)
    tracker.log_params({**params, **(identity or {})})
    return tracker


@dataclass
class FinishedRun:
    """The MLflow run of work that is done, for the process that logs it (log_finished): a stage's worker process
    hands its unit's run to the stage's own process, which logs it once the unit ends, so that the worker neither
    imports MLflow nor opens the store before it starts (base_models) and the stage's process has done both while
    it waited (warm_up). `steps`: (step, metrics) in order; `artifacts`: files to log; times in Unix seconds."""

    stage: str
    params: dict[str, Any]
    outputs: str
    started_at: float
    ended_at: float
    steps: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    status: str = "FINISHED"

    @classmethod
    def of_training(cls, stage: str, params: dict[str, Any], outputs: str | Path, started_at: float,
                    history: list[tuple[int, dict[str, float]]], metrics: dict[str, Any]) -> "FinishedRun":
        """The run of a model's training that ends now: its history's (step, metrics), then its numeric final
        `metrics` at its last step (`metrics["steps"]`)."""
        final = {key: value for key, value in metrics.items() if isinstance(value, (int, float))}
        return cls(stage, params, str(outputs), started_at, time.time(), [*history, (metrics.get("steps", 0), final)])


def log_finished(run: FinishedRun, profile: str) -> None:
    """Log `run` as start_run would have logged its work live: the same tags and params, its metrics step by step,
    its artifacts, started and ended when the work did; MLflow errors never raise (one warning line)."""
    tracker = _open_run(run.stage, run.params, None, None, profile=profile, outputs=run.outputs,
                        started_at=run.started_at)
    for step, metrics in run.steps:
        tracker.log_metrics(metrics, step=step)
    for path in run.artifacts:
        tracker.log_artifact(path)
    tracker.finish(run.status, ended_at=run.ended_at)


@contextlib.contextmanager
def start_run(
    stage: str,
    params: dict[str, Any],
    tags: dict[str, Any] | None = None,
    run_name: str | None = None,
    *,
    profile: str,
    outputs: str | Path,
    seed: int | None = None,
    algorithm: str | None = None,
    key: str | None = None,
    source: str | None = None,
    identity: dict[str, str] | None = None,
) -> Iterator[Tracker]:
    """An MLflow run for one DVC stage (or one training run of it), logging the resolved `params` flattened.

    `outputs` is the folder of the stage's DVC outputs, named in the warning when MLflow is unavailable. `key` names
    what the run is a run of within the profile (a training run's "<group>/<run>/seed<k>"; default: its run name,
    e.g. evaluate): a new run of a key supersedes the older ones (see the module docstring). `source` is the code
    that ran, shown in the UI's Source column; default: the module run as __main__ (e.g. "pipeline.train").
    `identity` (run_identity) is logged as params and tags beside `params`, but left out of config_hash, which stands
    for config.json. The run ends FINISHED, KILLED if the body is interrupted (KeyboardInterrupt, SystemExit,
    SIGTERM) or FAILED if it raises; the exception propagates, MLflow errors never do.
    """
    tracker = _open_run(stage, params, tags, run_name, profile=profile, outputs=outputs, seed=seed,
                        algorithm=algorithm, key=key, source=source, identity=identity)
    try:
        with _sigterm_raises_system_exit():
            yield tracker
    except (KeyboardInterrupt, SystemExit):
        tracker.finish("KILLED")
        raise
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish("FINISHED")


def run_folders(runs_dir: Path) -> list[Path]:
    """The finished training runs under runs_dir: <group>/<run>/seed<k>/ folders holding every one of RUN_FILES."""
    return sorted(p for p in runs_dir.glob("*/*/seed*") if all((p / name).is_file() for name in RUN_FILES))


def read_history(path: Path) -> list[tuple[int, dict[str, float]]]:
    """history.csv as (step, metrics) per row: the `iteration` column is the step (and, as in training, a metric
    too); empty cells (a metric not measured that iteration) are left out."""
    with open(path, newline="") as fh:
        return [
            (int(float(row["iteration"])), {name: float(cell) for name, cell in row.items() if cell != ""})
            for row in csv.DictReader(fh)
        ]


def _is_logged(client, experiment_id: str, run_key: str, digest: str) -> bool:
    """Whether the current run of run_key (not superseded) finished with the config whose hash is `digest`."""
    return any(
        run.info.status == "FINISHED" and run.data.tags.get("config_hash") == digest
        and run.data.tags.get("superseded") != "true"
        for run in _runs_of(client, experiment_id, run_key)
    )


def _log_samples(client, run_id: str, path: Path, iterations: int) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    client.log_table(run_id, samples_table(rows, iterations), SAMPLES_TABLE)


def _restore(
    client, experiment_id: str, folder: Path, key: str, profile: str, config: dict[str, Any], task: str | None
) -> None:
    """Log a run folder as the finished training run it records, with the commit that trained it."""
    from mlflow.entities import Metric, Param

    summary = json.loads((folder / "summary.json").read_text())
    trained_by = folder / "provenance.json"
    provenance_ = json.loads(trained_by.read_text()) if trained_by.is_file() else {}
    commit = provenance_.get("git_commit", "unknown")
    identity = run_identity(key, task, provenance_.get("model"))
    extra = {**identity, "seed": summary.get("seed"), "algorithm": summary.get("algorithm"), "restored_from": "dvc"}
    tags = run_tags("train", profile, config, commit=commit, source="pipeline.train", key=key,
                    extra={name: value for name, value in extra.items() if value is not None})
    run_id = _create_run(client, experiment_id, key, tags)
    now = int(time.time() * 1000)
    metrics = [Metric(name, value, now, step) for step, row in read_history(folder / "history.csv")
               for name, value in row.items()]
    params = [Param(name, value) for name, value in flatten({**config, **identity}).items()]
    client.log_batch(run_id, metrics=metrics, params=params)
    if (folder / "samples.jsonl").is_file():
        _log_samples(client, run_id, folder / "samples.jsonl", config["iterations"])
    client.set_terminated(run_id, "FINISHED")


def sync_runs(runs_dir: Path, profile: str, tasks: dict[str, str] | None = None) -> list[str]:
    """Make sure every finished run folder under runs_dir has a current MLflow run of its config; returns the keys
    ("<group>/<run>/seed<k>") of the runs it had to log. `tasks` maps a group to its task's name (the `task` param).

    A run DVC restored from its cache, or that `dvc pull` fetched, never ran here; after `dvc repro` the report stage
    calls this so that MLflow still lists every result the report is made of."""
    folders = run_folders(runs_dir)
    logged = []
    if not folders:
        return logged  # nothing to list: no reason to open the store (or warn that it cannot be)
    try:
        client = _client()
        experiment_id = _experiment_id(client, profile)
        for folder in folders:
            key = folder.relative_to(runs_dir).as_posix()
            config = json.loads((folder / "config.json").read_text())
            if not _is_logged(client, experiment_id, f"{profile}/{key}", config_hash(config)):
                _restore(client, experiment_id, folder, key, profile, config, (tasks or {}).get(key.split("/")[0]))
                logged.append(key)
    except Exception as exc:  # noqa: BLE001 - tracking must never break a stage
        _warn(f"sync_runs failed: {exc}", runs_dir)
    return logged


# --------------------------------------------------------------------------------------------------------------------
# The parent run of one `dvc repro`
# --------------------------------------------------------------------------------------------------------------------

HEADLINE = {"task_reward": "task reward", "kl": "KL"}
"""The per-model final values of each training run that the parent run shows, with their column titles."""


def headline_metrics(runs_dir: Path) -> dict[str, float]:
    """The pipeline's headline numbers from training: each run's final task reward and KL per model (summary.json's
    `final`, the mean over its last iterations), averaged over its seeds, as "headline/<group>.<run>.<llm>.<metric>"
    (one "/": the UI draws every metric of one prefix in one section of charts, so these make one section). A run's
    name may hold a "." (pareto's cory_eta0.01), a group's (a key of `experiments:`, e.g. imdb) is taken not to."""
    values: dict[str, list[float]] = {}
    for folder in run_folders(runs_dir):
        run = folder.parent.relative_to(runs_dir).as_posix()
        for name, value in json.loads((folder / "summary.json").read_text())["final"].items():
            llm, _, metric = name.partition("/")
            if llm.startswith("llm") and metric in HEADLINE and value is not None:
                values.setdefault(f"headline/{run.replace('/', '.')}.{llm}.{metric}", []).append(float(value))
    return {name: sum(seeds) / len(seeds) for name, seeds in sorted(values.items())}


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def headline_markdown(metrics: dict[str, float], passk: dict[str, Any], verdicts: dict[str, str]) -> str:
    """The parent run's description (the UI's run page shows it): headline_metrics, Pass@k (eval/passk.json's mean
    over seeds) and the claims' verdicts as tables."""
    runs = sorted({name.removeprefix("headline/").rsplit(".", 2)[0] for name in metrics})
    columns = [(llm, metric) for llm in ("llm1", "llm2") for metric in HEADLINE]
    lines = ["Final values (mean over the last iterations, then over seeds). The runs this pipeline is made of are "
             "nested under this run: expand it (+) in the run list.", "",
             "| run | " + " | ".join(f"{llm.upper()} {HEADLINE[metric]}" for llm, metric in columns) + " |",
             "|---" * (len(columns) + 1) + "|"]
    # "<group>.<run>" back to "<group>/<run>": only the first "." (a run's name may hold one: pareto/cory_eta0.01)
    lines += [f"| {run.replace('.', '/', 1)} | " + " | ".join(_cell(metrics.get(f"headline/{run}.{llm}.{metric}"))
                                                           for llm, metric in columns) + " |" for run in runs]
    ks = sorted({k for result in passk.values() for k in result["mean"]}, key=int)
    if passk:
        lines += ["", "| model | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---" * (len(ks) + 1) + "|"]
        lines += [f"| {model} | " + " | ".join(_cell(result["mean"].get(k)) for k in ks) + " |"
                  for model, result in passk.items()]
    if verdicts:
        lines += ["", "| claim | verdict |", "|---|---|"] + [f"| {key} | {v} |" for key, v in verdicts.items()]
    return "\n".join(lines) + "\n"


def _all_runs(client, experiment_id: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        runs += page
        token = page.token
        if not token:
            return runs


def _nest(client, parent_id: str, profile: str, runs_dir: Path) -> list[str]:
    """Make the runs the report is made of children of `parent_id` (returns their ids): the current run of every
    finished run folder, and the newest finished run of every other stage (by run name, e.g. base_model@math)."""
    experiment_id = client.get_run(parent_id).info.experiment_id
    current = [run for run in _all_runs(client, experiment_id)
               if run.data.tags.get("superseded") != "true" and run.info.run_id != parent_id]
    keys = {f"{profile}/{folder.relative_to(runs_dir).as_posix()}" for folder in run_folders(runs_dir)}
    newest: dict[str, Any] = {}
    for run in current:
        stage = run.data.tags.get("dvc_stage")
        if stage in ("train", "report") or run.info.status != "FINISHED":
            continue
        if run.info.run_name not in newest or run.info.start_time > newest[run.info.run_name].info.start_time:
            newest[run.info.run_name] = run
    children = [run.info.run_id for run in current if run.data.tags.get("run_key") in keys]
    children += [run.info.run_id for run in newest.values()]
    for child in children:
        client.set_tag(child, "mlflow.parentRunId", parent_id)
    return children


def log_pipeline_run(profile: str, runs_dir: Path, passk_path: Path, reports: Path) -> str | None:
    """The parent run of one `dvc repro`, logged by the report stage once reports/<profile>/ is written; returns its
    id (None if MLflow is unavailable). Named "pipeline <pipeline_run>" and keyed PIPELINE_KEY (the previous
    pipeline's parent is superseded), it holds the headline numbers (headline_metrics) as metrics at step 0 and as its
    description, Pass@k of each model (eval/passk.json's mean over seeds) as "headline/pass_at_<k>.<model>", each
    claim's verdict as a tag `claim.<key>`, reports/<profile>/ as artifacts under report/, and, nested under it by
    the tag mlflow.parentRunId, every run the report is made of (_nest)."""
    try:
        metrics = headline_metrics(runs_dir)
        passk = json.loads(passk_path.read_text()) if passk_path.is_file() else {}
        claims = reports / "claims.json"
        verdicts = {key: claim["verdict"] for key, claim in json.loads(claims.read_text()).items()} \
            if claims.is_file() else {}
    except Exception as exc:  # noqa: BLE001 - tracking must never break a stage
        _warn(f"log_pipeline_run failed: {exc}", reports)
        return None
    tags = {"mlflow.note.content": headline_markdown(metrics, passk, verdicts),
            **{f"claim.{key}": verdict for key, verdict in verdicts.items()}}
    name = f"pipeline {pipeline_run_id(git_commit())[:12]}"
    with start_run("report", {}, tags, name, profile=profile, outputs=reports, key=PIPELINE_KEY,
                   source="pipeline.report") as parent:
        parent.log_metrics({**metrics, **{f"headline/pass_at_{k}.{model}": value for model, result in passk.items()
                                          for k, value in result["mean"].items()}}, step=0)
        if reports.is_dir():
            parent.log_artifacts(reports, "report")
        parent._call("nest runs", lambda: _nest(parent._client, parent.run_id, profile, runs_dir))
    return parent.run_id if parent.active else None
