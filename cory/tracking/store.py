"""The MLflow store: where it is, opening it once per process (in a thread while the stage waits for its workers),
creating it before processes that log at once, the profile's experiment, and creating a run that supersedes the
older runs of its key."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cory.tracking.tags import PROJECT_ROOT


def store_root(root: Path = PROJECT_ROOT) -> Path:
    """Where the default store lives: the project root, or, for a `dvc exp run --temp` (which runs the stages in a
    copy of the repository at <repository>/.dvc/tmp/exps/<...>/, deleted afterwards), the repository's root, so that
    the experiment's runs land in the store the user opens."""
    parts = root.parts
    for i in range(len(parts) - 2):
        if parts[i:i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return root


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{store_root() / 'mlflow.db'}"


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


_UNAVAILABLE: str | None = None
"""Why MLflow failed in this process (None: it has not): from then on the process logs nothing to it, without a
further warning. A store that failed once (deleted, read-only, unreachable) fails every run after it, each after its
own retries and error logs; the report stage logs the runs MLflow then lacks from their folders (cory.tracking.restore),
once it is back."""


def unavailable() -> str | None:
    """Why MLflow is off in this process, or None."""
    return _UNAVAILABLE


def warn(reason: Any, outputs: str | Path) -> None:
    """The one warning of a stage whose MLflow failed (`reason`), and MLflow off in this process from now on: a stage
    prints it once, in whichever of its processes (the stage's, its pool's workers) fails first (_first_in_stage)."""
    global _UNAVAILABLE
    reason = " ".join(str(reason).split())[:300]
    if _UNAVAILABLE is not None:
        return
    _UNAVAILABLE = reason
    if _first_in_stage():
        print(f"WARNING: MLflow unavailable ({reason}): outputs are still written to {outputs}", file=sys.stderr,
              flush=True)


MARKER = "cory-mlflow-warned-"
"""Prefix of the file in the temporary folder by which a stage's processes agree that one of them has warned."""


def _first_in_stage() -> bool:
    """Whether no other process of this stage has printed the warning: the first to create the stage's marker file
    (named by the stage process, which is a pool worker's parent, and its start) prints it. Markers of stages that
    have ended are removed."""
    import multiprocessing

    parent = multiprocessing.parent_process()  # a pool worker's: the stage process
    stage = parent.pid if parent is not None else os.getpid()
    folder = Path(tempfile.gettempdir())
    for old in folder.glob(f"{MARKER}*"):
        if not _alive(old.name.removeprefix(MARKER)):
            old.unlink(missing_ok=True)
    try:
        os.close(os.open(folder / f"{MARKER}{stage}-{_started(stage)}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:
        return True  # no marker can be written: better a warning per process than none
    return True


def forget_warning() -> None:
    """MLflow on again in this process, its stage's warning not yet printed (for a process that runs stage after
    stage: the tests)."""
    global _UNAVAILABLE
    _UNAVAILABLE = None
    for marker in Path(tempfile.gettempdir()).glob(f"{MARKER}{os.getpid()}-*"):
        marker.unlink(missing_ok=True)


def _started(pid: int) -> str:
    """A process's start time in clock ticks since boot (with its pid, a name no later process shares)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"


def _alive(marker: str) -> bool:
    pid, _, started = marker.partition("-")
    return pid.isdigit() and _started(int(pid)) == started and started != "0"


def quiet_mlflow_logs() -> None:
    """MLflow's own error logs of a failed write (SQLAlchemy's traceback, the async queue's error per batch), which
    the one warning (`warn`) replaces: at CRITICAL, they print nothing."""
    import logging

    for name in ("mlflow.store.db.utils", "mlflow.utils.async_logging", "mlflow.tracking._tracking_service.client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


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


def mlflow_client():
    if _WARMING is not None and _WARMING is not threading.current_thread():
        _WARMING.join()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # the logging thread collects a second's metrics into one write (fewer SQLite transactions from the processes
    # that log at once) and, waiting on an event rather than on the queue, wakes at once when a run is flushed
    os.environ.setdefault("MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS", "1")
    if _UNAVAILABLE is not None:
        raise RuntimeError(f"MLflow failed earlier in this process ({_UNAVAILABLE})")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise RuntimeError("mlflow is not installed") from None
    quiet_mlflow_logs()
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
        experiment_of(mlflow_client(), profile)
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


EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
"""The experiment's kind for MLflow 3's UI: a model-training experiment, which opens on its runs table (without it
the UI infers a GenAI experiment and opens on an empty traces overview)."""


def experiment_of(client, profile: str) -> str:
    from mlflow.exceptions import MlflowException

    name = f"cory-{profile}"
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            client.create_experiment(name, artifact_location=_artifact_location(tracking_uri()), tags=EXPERIMENT_KIND)
        except MlflowException:
            pass  # another stage created it meanwhile
        experiment = client.get_experiment_by_name(name)
    return experiment.experiment_id


def runs_of(client, experiment_id: str, run_key: str) -> list:
    return client.search_runs([experiment_id], f"tags.run_key = '{run_key}'", max_results=1000)


def create_run(client, experiment_id: str, run_name: str, tags: dict[str, str], start_time: int | None = None) -> str:
    """A new run (started at `start_time`, Unix ms; default now); the older runs of its run_key (if it has one) are
    superseded by it."""
    from mlflow.entities import RunTag

    run_id = client.create_run(experiment_id, start_time=start_time, run_name=run_name, tags=tags).info.run_id
    if "run_key" not in tags:
        return run_id
    for old in runs_of(client, experiment_id, tags["run_key"]):
        if old.info.run_id == run_id or old.data.tags.get("superseded") == "true":
            continue
        client.log_batch(old.info.run_id, tags=[RunTag("superseded", "true"), RunTag("superseded_by", run_id)])
        if old.info.status == "RUNNING":
            client.set_terminated(old.info.run_id, "KILLED")
    return run_id
