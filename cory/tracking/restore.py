"""Results DVC restored from its cache (or `dvc pull` fetched) ran no code here: `sync_runs` logs each such run folder
as the finished training run it records (tagged `restored_from=dvc`), so MLflow lists every result the report reads."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

from cory.files import read_json
from cory.tracking.runs import log_samples_table
from cory.tracking.store import create_run, experiment_of, mlflow_client, runs_of, warn
from cory.tracking.tags import config_hash, flatten, run_identity, run_tags


RUN_FILES = ("config.json", "history.csv", "summary.json")
"""The files of a finished training run folder that sync_runs reads (summary.json is written last)."""


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
        for run in runs_of(client, experiment_id, run_key)
    )


def _restore(
    client, experiment_id: str, folder: Path, key: str, profile: str, config: dict[str, Any], task: str | None
) -> None:
    """Log a run folder as the finished training run it records, with the commit that trained it."""
    from mlflow.entities import Metric, Param

    summary = read_json(folder / "summary.json")
    trained_by = folder / "provenance.json"
    provenance_ = read_json(trained_by) if trained_by.is_file() else {}
    commit = provenance_.get("git_commit", "unknown")
    identity = run_identity(key, task, provenance_.get("model"))
    extra = {**identity, "seed": summary.get("seed"), "algorithm": summary.get("algorithm"), "restored_from": "dvc"}
    tags = run_tags("train", profile, config, commit=commit, source="pipeline.train", key=key,
                    extra={name: value for name, value in extra.items() if value is not None})
    run_id = create_run(client, experiment_id, key, tags)
    now = int(time.time() * 1000)
    metrics = [Metric(name, value, now, step) for step, row in read_history(folder / "history.csv")
               for name, value in row.items()]
    params = [Param(name, value) for name, value in flatten({**config, **identity}).items()]
    client.log_batch(run_id, metrics=metrics, params=params)
    if (folder / "samples.jsonl").is_file():
        log_samples_table(client, run_id, folder / "samples.jsonl", config["iterations"])
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
        client = mlflow_client()
        experiment_id = experiment_of(client, profile)
        for folder in folders:
            key = folder.relative_to(runs_dir).as_posix()
            config = read_json(folder / "config.json")
            if not _is_logged(client, experiment_id, f"{profile}/{key}", config_hash(config)):
                _restore(client, experiment_id, folder, key, profile, config, (tasks or {}).get(key.split("/")[0]))
                logged.append(key)
    except Exception as exc:  # noqa: BLE001 - tracking must never break a stage
        warn(f"sync_runs failed: {exc}", runs_dir)
    return logged
