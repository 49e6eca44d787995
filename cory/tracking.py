"""MLflow tracking that never breaks a stage.

The files each DVC stage writes are the record of a run; MLflow is a convenience view over them (runs of one profile
side by side in one experiment). So every MLflow problem (not installed, as on the GPU machine; a store that cannot
be opened or reached; an error mid-run) prints ONE warning line and turns the tracker into a no-op.

Store: $MLFLOW_TRACKING_URI, else `sqlite:///<project root>/mlflow.db` (MLflow 3 refuses the old ./mlruns file
store); a SQLite store keeps its artifacts in `mlartifacts/` next to its file. Experiment: `cory-<profile>`. Every
run is tagged with its DVC stage, profile, git commit, `pipeline_run` ($CORY_PIPELINE_RUN, else the commit: one
`dvc repro` shares one id), and, for training runs, seed and algorithm. Metrics are sent asynchronously, one batch
per step, so logging never waits on the store inside a training loop.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The checkout this library runs from (it is installed editable); the default store lives here."""


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
            reason = " ".join(str(reason).split())[:300]
            message = f"WARNING: MLflow unavailable ({reason}): outputs are still written to {self._outputs}"
            print(message, file=sys.stderr)
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
        """Wait for pending metrics, then mark the run FINISHED or FAILED."""
        for op in self._pending:
            self._call("log_metrics", op.wait)
        self._pending.clear()
        self._call("end run", lambda: self._client.set_terminated(self.run_id, status))


def _open_run(stage: str, profile: str, run_name: str | None, tags: dict[str, str]):
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise RuntimeError("mlflow is not installed") from None
    uri = tracking_uri()
    _check_reachable(uri)
    client = MlflowClient(tracking_uri=uri)
    name = f"cory-{profile}"
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            client.create_experiment(name, artifact_location=_artifact_location(uri))
        except MlflowException:
            pass  # another stage created it meanwhile
        experiment = client.get_experiment_by_name(name)
    run = client.create_run(experiment.experiment_id, run_name=run_name or stage, tags=tags)
    return client, run.info.run_id


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
) -> Iterator[Tracker]:
    """An MLflow run for one DVC stage (or one training run of it), logging the resolved `params` flattened.

    `outputs` is the folder of the stage's DVC outputs, named in the warning when MLflow is unavailable. The run
    ends FINISHED, or FAILED if the body raises (the exception propagates; MLflow errors never do).
    """
    commit = git_commit()
    all_tags = {
        "dvc_stage": stage,
        "profile": profile,
        "git_commit": commit,
        "pipeline_run": os.environ.get("CORY_PIPELINE_RUN") or commit,
        **({"seed": seed} if seed is not None else {}),
        **({"algorithm": algorithm} if algorithm is not None else {}),
        **(tags or {}),
    }
    tracker = Tracker(None, None, outputs)
    try:
        client, run_id = _open_run(stage, profile, run_name, {k: str(v) for k, v in all_tags.items()})
        tracker = Tracker(client, run_id, outputs)
    except Exception as exc:  # noqa: BLE001 - tracking must never break a stage
        tracker.disable(exc)
    tracker.log_params(params)
    try:
        yield tracker
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish("FINISHED")
