"""Per-unit caching: what a unit of a stage's work (an RL run, a base model, the reward model) depends on, hashed into
its fingerprint (`digest`, of settings, input contents and the stage's code), whether a unit's outputs are current,
and the deletion of run folders no unit owns. The stages say what each unit depends on (pipeline.train: a run's
fingerprint, and its resume from a checkpoint of the same fingerprint; pipeline.base_models, pipeline.reward_model)
and use this one mechanism for the rest. It imports no library code but cory.schema and cory.files, so that no
stage's code deps (and fingerprints) take in another stage's code.

A fingerprint hashes a unit's settings, the content of its input files and the code its stage runs (the stage's code
deps in dvc.yaml), so a stage reruns exactly the units a change affects, whatever DVC reruns. A model folder enters
another unit's fingerprint by its weights, config and tokenizer files, not by its record (RECORD), which holds the
seconds its training took: a model trained again to the same weights leaves the runs that read it current.

A unit is kept only when its files are still what its record says it wrote (their sizes, sha256 and, for a history,
line counts: cory.files.folder_records): a truncated history.csv, a damaged .safetensors or a missing file makes the
unit one to train again, named in the stage's output, never a kept result.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
from pathlib import Path
from typing import Any

import yaml

from cory.files import mismatch, read_json
from cory.schema import digest as json_digest
from pipeline.paths import ROOT

DIGITS = 16
"""Hex digits of a fingerprint."""

RECORD = "training.json"
"""A model folder's training record (loss history, config, versions, its fingerprint, its files): written by the
stage that trained the model, and left out of the model's content digest."""


def digest(parts: dict[str, Any]) -> str:
    """A unit's fingerprint: the hash of what it depends on (`parts`: settings, input digests, code digest)."""
    return json_digest(parts, DIGITS)


def _digest(h, path: Path, leave_out: tuple[str, ...] = ()) -> None:
    """Feed a file, or every file of a folder (names and contents, in sorted order) but those at the paths in
    `leave_out` (relative to it), into hash `h`."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir() and file.relative_to(path).as_posix() in leave_out:
            continue
        h.update(str(file.relative_to(path) if path.is_dir() else file.name).encode() + b"\0")
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)


@functools.cache  # one stage run hashes each folder once, however many runs read it
def content_digest(path_or_name: str, leave_out: tuple[str, ...] = ()) -> str:
    """sha256 of a local file or folder's content (but the files at the paths in `leave_out`, relative to the
    folder); a hub name (no such local path) stands for itself."""
    path = Path(path_or_name)
    if not path.exists():
        return f"name:{path_or_name}"
    h = hashlib.sha256()
    _digest(h, path, leave_out)
    return h.hexdigest()


def model_digest(path_or_name: str) -> str:
    """A model folder's content without its training record (RECORD: its timings), or a hub name as itself."""
    return content_digest(path_or_name, (RECORD,))


def code_digest(stage: str, leave_out: tuple[str, ...] = ()) -> str:
    """sha256 of the code `stage` runs: its deps in dvc.yaml that are files of the repo (no ${profile} outputs), but
    those in `leave_out` (code that only some of the stage's units run)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    h = hashlib.sha256()
    for dep in sorted(d for d in stages[stage]["deps"] if "${" not in d and d not in leave_out):
        _digest(h, ROOT / dep)
    return h.hexdigest()


def stale(record: Path, outputs: list[Path], fingerprint: str) -> str | None:
    """Why a model unit cannot be kept, or None when it can: its record (RECORD) holds `fingerprint` (it was made
    from what it depends on now), every file the record lists in its folder is as recorded, and its other `outputs`
    (JSON files) are there and readable. A reason that names a damaged file starts with its path."""
    if not record.is_file():
        return "not trained yet"
    try:
        content = read_json(record)
    except ValueError as exc:
        return str(exc)
    if content.get("fingerprint") != fingerprint:
        return "what it depends on changed"
    if "files" not in content:
        return f"{record}: lists no files to check"
    damaged = mismatch(record.parent, content["files"])
    if damaged:
        return damaged
    for path in outputs:
        try:
            read_json(path)
        except (FileNotFoundError, ValueError) as exc:
            return str(exc)
    return None


def is_current(record: Path, outputs: list[Path], fingerprint: str) -> bool:
    """Whether the stage keeps a model unit (`stale` finds nothing against it)."""
    return stale(record, outputs, fingerprint) is None


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
