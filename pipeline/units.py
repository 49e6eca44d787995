"""Per-unit caching: what a unit of a stage's work (an RL run, a base model, the reward model) depends on, hashed into
its fingerprint (`digest`, of settings, input contents and the stage's code), whether a unit's outputs are current,
and the deletion of run folders no unit owns. The stages say what each unit depends on (pipeline.train: a run's
fingerprint, and its resume from a checkpoint of the same fingerprint; pipeline.base_models, pipeline.reward_model)
and use this one mechanism for the rest. It imports no library code but cory.schema, so that no stage's code deps
(and fingerprints) take in another stage's code.

A fingerprint hashes a unit's settings, the content of its input files and the code its stage runs (the stage's code
deps in dvc.yaml), so a stage reruns exactly the units a change affects, whatever DVC reruns.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from cory.schema import digest as json_digest
from pipeline.paths import ROOT

DIGITS = 16
"""Hex digits of a fingerprint."""


def digest(parts: dict[str, Any]) -> str:
    """A unit's fingerprint: the hash of what it depends on (`parts`: settings, input digests, code digest)."""
    return json_digest(parts, DIGITS)


def _digest(h, path: Path) -> None:
    """Feed a file, or every file of a folder (names and contents, in sorted order), into hash `h`."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        h.update(str(file.relative_to(path) if path.is_dir() else file.name).encode() + b"\0")
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)


@functools.cache  # one stage run hashes each folder once, however many runs read it
def content_digest(path_or_name: str) -> str:
    """sha256 of a local file or folder's content; a hub name (no such local path) stands for itself."""
    path = Path(path_or_name)
    if not path.exists():
        return f"name:{path_or_name}"
    h = hashlib.sha256()
    _digest(h, path)
    return h.hexdigest()


def code_digest(stage: str, leave_out: tuple[str, ...] = ()) -> str:
    """sha256 of the code `stage` runs: its deps in dvc.yaml that are files of the repo (no ${profile} outputs), but
    those in `leave_out` (code that only some of the stage's units run)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    h = hashlib.sha256()
    for dep in sorted(d for d in stages[stage]["deps"] if "${" not in d and d not in leave_out):
        _digest(h, ROOT / dep)
    return h.hexdigest()


def is_current(record: Path, outputs: list[Path], fingerprint: str) -> bool:
    """Whether a unit's outputs are all there and its record (a training.json) holds `fingerprint`: made from what it
    depends on now, so the stage keeps it."""
    if not (record.is_file() and all(path.is_file() for path in outputs)):
        return False
    return json.loads(record.read_text()).get("fingerprint") == fingerprint


def remove_stale(root: Path, jobs: list, groups: list[str], attr: str) -> list[str]:
    """Delete <root>/<group>/<run>/seed<k> folders of `groups` that belong to no job (runs renamed or removed from
    params, seeds dropped), then empty parents; returns what was deleted, relative to root."""
    keep = {Path(getattr(job, attr)).resolve() for job in jobs}
    removed = []
    for group in groups:
        for folder in sorted((root / group).glob("*/seed*")):
            if folder.resolve() not in keep:
                shutil.rmtree(folder)
                removed.append(str(folder.relative_to(root)))
        for parent in sorted((root / group).glob("*"), reverse=True):
            if parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()
    return removed
