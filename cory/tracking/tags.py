"""What an MLflow run is a run of: its tags (stage, profile, commit, pipeline run, config hash, run key, MLflow's own
Source, Version and User), a training run's identity, flattened params, and the provenance written next to every
output."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from cory.schema import digest



PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The checkout this library runs from (it is installed editable); the default store lives here."""


PIPELINE_KEY = "pipeline"
"""run_key (after "<profile>/") of the parent run of one `dvc repro`: the newest supersedes the older ones."""


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
    return digest(config, 12)


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
