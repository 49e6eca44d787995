"""Per-unit caching: what a unit of a stage's work (an RL run, a base model, the reward model) depends on, hashed into
its fingerprint (`digest`, of settings, input contents and the stage's code), whether a unit's outputs are current,
the deletion of run folders no unit owns, and the train stage's plan (`plan`: which runs are kept, resumed, trained,
or trained beside the older version they replace once they finish). The stages say what each unit depends on
(pipeline.jobs: a run's fingerprint; pipeline.base_models, pipeline.reward_model) and use this one mechanism for the
rest. It imports no library code but cory.schema and cory.files (the train stage hands `plan` its checkpoint
reader), so that no stage's code deps (and fingerprints) take in another stage's code.

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
from typing import Any, Callable

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
    params, seeds dropped; a replaced run's folder a kill left aside), then empty parents; returns what was deleted,
    relative to root. A job's staged folder (NEXT) is its own."""
    keep = {Path(getattr(job, attr) + suffix).resolve() for job in jobs for suffix in ("", NEXT)}
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


# --------------------------------------------------------------------------------------------------------------------
# The train stage's runs: kept, resumed, trained, or replaced once their new run has finished
# --------------------------------------------------------------------------------------------------------------------

NEXT = ".next"
"""Suffix of the folders where a run is trained whose older version (another fingerprint) holds its place: the older
one stays until the new one has finished (`promote`), so that an interrupted experiment loses nothing it had."""
OLD = ".old"
"""Suffix of a replaced run's folder while its new version takes its place."""


def staged(job):
    """The job trained beside its older version: its run and checkpoint folders with the NEXT suffix."""
    from dataclasses import replace

    return replace(job, run_dir=job.run_dir + NEXT, checkpoint_dir=job.checkpoint_dir + NEXT)


def promote(job) -> None:
    """Put a finished staged run (a job whose folders end in NEXT) in its older version's place: its checkpoint folder
    first, its run folder (whose summary.json marks a finished run) last, each older folder moved aside and then
    deleted; a kill in between leaves the staged run folder, which the next `plan` promotes. A job trained in place
    stays as it is."""
    for folder in (job.checkpoint_dir, job.run_dir):
        if not folder.endswith(NEXT) or not Path(folder).exists():
            continue
        final = Path(folder.removesuffix(NEXT))
        aside = final.with_name(final.name + OLD)
        shutil.rmtree(aside, ignore_errors=True)
        if final.exists():
            final.rename(aside)
        Path(folder).rename(final)
        shutil.rmtree(aside, ignore_errors=True)


def finished_summary(job) -> dict | None:
    """The summary of a finished run of this very fingerprint whose files (and saved agents, if it saves them) are
    still those it wrote (cory.runs.run records them in summary.json), else None. A damaged file is said, naming it:
    the run is trained again, and the other runs go on."""
    path = Path(job.run_dir) / "summary.json"
    if not path.is_file():
        return None
    try:
        summary = read_json(path)
    except ValueError as exc:
        print(f"[train] {job.name}: {exc}: trained again", flush=True)
        return None
    if summary.get("fingerprint") != job.fingerprint:
        return None
    records = [(job.run_dir, summary.get("files"))]
    if job.save_models:
        records.append((job.checkpoint_dir, summary.get("saved_files")))
    for folder, files in records:
        damaged = f"{path}: lists no files to check" if not files else mismatch(folder, files)
        if damaged:
            print(f"[train] {job.name}: {damaged}: trained again", flush=True)
            return None
    return summary


def _fingerprint_of(summary: Path) -> str | None:
    try:
        return read_json(summary).get("fingerprint") if summary.is_file() else None
    except (ValueError, AttributeError):
        return None


def checkpoint_fingerprint(job, checkpoint_extra: Callable) -> str | None:
    """The fingerprint of the job's resume checkpoint (<checkpoint_dir>/resume, read by `checkpoint_extra`); None
    where there is none, or it cannot be read (said: the run starts over)."""
    try:
        extra = checkpoint_extra(Path(job.checkpoint_dir) / "resume")
    except ValueError as exc:  # cory.rl.checkpoint.CheckpointError: this run starts over, the others go on
        print(f"[train] {job.name}: {exc}: the run starts over", flush=True)
        return None
    return None if extra is None else extra.get("fingerprint")


def plan(jobs: list, checkpoint_extra: Callable) -> tuple[dict[str, dict], list, int]:
    """({name: summary} of the finished runs to keep, the jobs to run, how many of them replace an older version): a
    job resumes if its checkpoint carries its fingerprint, staged or in its place; a job whose folders hold another
    version of its run (finished, or killed with a checkpoint of another fingerprint) is trained staged (NEXT) and
    replaces it once it finishes; any other job starts from nothing in its place. A finished staged run that a kill
    kept from its place is put there first."""
    done, todo, replacing = {}, [], 0
    for job in jobs:
        beside = staged(job)
        if _fingerprint_of(Path(beside.run_dir) / "summary.json") == job.fingerprint:  # finished, not yet in place
            promote(beside)  # (its files are checked in place, below)
        summary = finished_summary(job)
        if summary is not None:
            done[job.name] = summary
            continue
        if checkpoint_fingerprint(beside, checkpoint_extra) == job.fingerprint:
            todo.append(beside)
            replacing += 1
            continue
        own = checkpoint_fingerprint(job, checkpoint_extra)
        if own == job.fingerprint:
            todo.append(job)
            continue
        older = (Path(job.run_dir) / "summary.json").is_file() or own is not None
        for folder in (beside.run_dir, beside.checkpoint_dir) + (() if older else (job.run_dir, job.checkpoint_dir)):
            shutil.rmtree(folder, ignore_errors=True)
        todo.append(beside if older else job)  # an older version stays in place until the new one has finished
        replacing += older
    return done, todo, replacing
