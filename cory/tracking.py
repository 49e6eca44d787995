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
- A run started with a `key` (a training run's "<group>/<run>/seed<k>") is tagged `run_key` = "<profile>/<key>".
  A new run of a key never reuses an old one, even with the same config_hash (DVC ran the code again, so it is a new
  run): every older run of the key is tagged `superseded=true` and `superseded_by=<new run id>`, and one still RUNNING
  (its process is gone) ends KILLED. The current run of a key is the one without the `superseded` tag.
- A run ends FINISHED; KILLED if its body is interrupted (Ctrl-C, SystemExit, or SIGTERM, which start_run turns into
  SystemExit so that the run can still be closed); FAILED on any other exception.
- Results DVC restores from its cache (or `dvc pull`s) ran no code, so sync_runs, called by the report stage, logs a
  run tagged `restored_from=dvc` (params from config.json, metric history from history.csv) for every run folder
  whose current run is missing, unfinished or of another config_hash.
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
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The checkout this library runs from (it is installed editable); the default store lives here."""

RUN_FILES = ("config.json", "history.csv", "summary.json")
"""The files of a finished training run folder that sync_runs reads (summary.json is written last)."""


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
    fills none of them."""
    tags = {
        "dvc_stage": stage,
        "profile": profile,
        "git_commit": commit,
        "pipeline_run": os.environ.get("CORY_PIPELINE_RUN") or commit,
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

    def log_dict(self, dictionary: dict[str, Any], artifact_file: str) -> None:
        self._call("log_dict", lambda: self._client.log_dict(self.run_id, dictionary, artifact_file))

    def finish(self, status: str) -> None:
        """Wait for pending metrics, then end the run with `status` (FINISHED, FAILED or KILLED)."""
        for op in self._pending:
            self._call("log_metrics", op.wait)
        self._pending.clear()
        self._call("end run", lambda: self._client.set_terminated(self.run_id, status))


def _client():
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise RuntimeError("mlflow is not installed") from None
    uri = tracking_uri()
    _check_reachable(uri)
    return MlflowClient(tracking_uri=uri)


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


def _create_run(client, experiment_id: str, run_name: str, tags: dict[str, str]) -> str:
    """A new run; the older runs of its run_key (if it has one) are superseded by it."""
    from mlflow.entities import RunTag

    run_id = client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id
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
) -> Iterator[Tracker]:
    """An MLflow run for one DVC stage (or one training run of it), logging the resolved `params` flattened.

    `outputs` is the folder of the stage's DVC outputs, named in the warning when MLflow is unavailable. `key` names
    what the run is a run of within the profile (a training run's "<group>/<run>/seed<k>"): a new run of a key
    supersedes the older ones (see the module docstring). `source` is the code that ran, shown in the UI's Source
    column; default: the module run as __main__ (e.g. "pipeline.train"). The run ends FINISHED, KILLED if the body is
    interrupted (KeyboardInterrupt, SystemExit, SIGTERM) or FAILED if it raises; the exception propagates, MLflow
    errors never do.
    """
    extra = {
        **({"seed": seed} if seed is not None else {}),
        **({"algorithm": algorithm} if algorithm is not None else {}),
        **(tags or {}),
    }
    tracker = Tracker(None, None, outputs)
    try:
        all_tags = run_tags(stage, profile, params, commit=git_commit(), source=source or main_module(), key=key,
                            extra=extra)
        client = _client()
        run_id = _create_run(client, _experiment_id(client, profile), run_name or stage, all_tags)
        tracker = Tracker(client, run_id, outputs)
    except Exception as exc:  # noqa: BLE001 - tracking must never break a stage
        tracker.disable(exc)
    tracker.log_params(params)
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


def _restore(client, experiment_id: str, folder: Path, key: str, profile: str, config: dict[str, Any]) -> None:
    """Log a run folder as the finished training run it records, with the commit that trained it."""
    from mlflow.entities import Metric, Param

    summary = json.loads((folder / "summary.json").read_text())
    trained_by = folder / "provenance.json"
    commit = json.loads(trained_by.read_text()).get("git_commit", "unknown") if trained_by.is_file() else "unknown"
    group, run, _ = key.split("/")
    extra = {"group": group, "run": run, "seed": summary.get("seed"), "algorithm": summary.get("algorithm"),
             "restored_from": "dvc"}
    tags = run_tags("train", profile, config, commit=commit, source="pipeline.train", key=key,
                    extra={name: value for name, value in extra.items() if value is not None})
    run_id = _create_run(client, experiment_id, key, tags)
    now = int(time.time() * 1000)
    metrics = [Metric(name, value, now, step) for step, row in read_history(folder / "history.csv")
               for name, value in row.items()]
    client.log_batch(run_id, metrics=metrics, params=[Param(name, value) for name, value in flatten(config).items()])
    client.set_terminated(run_id, "FINISHED")


def sync_runs(runs_dir: Path, profile: str) -> list[str]:
    """Make sure every finished run folder under runs_dir has a current MLflow run of its config; returns the keys
    ("<group>/<run>/seed<k>") of the runs it had to log.

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
                _restore(client, experiment_id, folder, key, profile, config)
                logged.append(key)
    except Exception as exc:  # noqa: BLE001 - tracking must never break a stage
        _warn(f"sync_runs failed: {exc}", runs_dir)
    return logged
