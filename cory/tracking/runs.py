"""One MLflow run: `start_run` around live work (a stage, a training run), `Tracker` that logs to it and turns into a
no-op at the first problem, `FinishedRun` for work logged once it is done, and a run's generations as a table."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cory.files import read_jsonl
from cory.tracking.store import create_run, experiment_of, mlflow_client, unavailable, warn
from cory.tracking.tags import flatten, git_commit, main_module, run_tags


SAMPLES_TABLE = "samples.json"
"""A training run's generations as an MLflow table artifact (samples_table): the run's Artifacts tab shows it, and
the runs page's "Artifact evaluation" view sets it side by side across runs."""


def samples_table(rows: list[dict[str, Any]], iterations: int) -> dict[str, list]:
    """samples.jsonl (cory.rl.trainer: one row per query, with <role>_agent/_prompt/_response/_score per role) as one
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


def log_samples_table(client, run_id: str, samples: Path | list[dict[str, Any]], iterations: int) -> None:
    """Add `samples` (samples.jsonl's rows, or the file) to the run's table; MLflow appends to a table it has."""
    rows = read_jsonl(samples) if isinstance(samples, (str, Path)) else samples
    if rows:
        client.log_table(run_id, samples_table(rows, iterations), SAMPLES_TABLE)


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
            warn(reason, self._outputs)
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

    def log_samples(self, samples: str | Path | list[dict[str, Any]], iterations: int) -> None:
        """Add generations to the run's table SAMPLES_TABLE (see samples_table): rows as samples.jsonl holds them
        (a training run sends each logged iteration's as it ends), or such a file."""
        samples = Path(samples) if isinstance(samples, str) else samples
        self._call("log_samples", lambda: log_samples_table(self._client, self.run_id, samples, iterations))

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
    if unavailable() is not None:
        return tracker  # this process has warned already, and logs nothing more
    try:
        all_tags = run_tags(stage, profile, params, commit=git_commit(), source=source or main_module(), key=key,
                            extra=extra)
        client = mlflow_client()
        start = None if started_at is None else int(started_at * 1000)
        run_id = create_run(client, experiment_of(client, profile), run_name or stage, all_tags, start)
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
