"""The small state files every wing writes and reads (summaries, records, configs, checkpoints' state): written
atomically, read with errors that name the file, and what a kept file must still hold (sizes, row counts, hashes).

A stage killed while it writes a file, or a disk that fills up meanwhile, must leave either the old file or the new
one, never half of one: a half-written summary.json would otherwise stop the next stage with a bare JSON error, and a
half-written record would be read as the record of a finished unit. So every such file is written to a temporary file
in its own folder (the same filesystem, so the rename is atomic), flushed to the disk, and renamed over the old one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` to `path` so that a reader (or a crash) sees the old file or the whole new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def finite(obj: Any) -> Any:
    """`obj` with every NaN or infinite float made None: json.dumps writes them as bare NaN / Infinity, which no JSON
    reader but Python's accepts (DVC, jq, MLflow's artifact viewer refuse the file)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: finite(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(value) for value in obj]
    return obj


def json_text(obj: Any, **dump: Any) -> str:
    """`obj` as strict JSON text (non-finite floats as null), with json.dumps' `dump` options."""
    return json.dumps(finite(obj), allow_nan=False, **dump)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """`obj` as indented JSON with sorted keys, written atomically (the format of every record and summary)."""
    atomic_write(path, json_text(obj, indent=2, sort_keys=True) + "\n")


def write_jsonl(path: str | os.PathLike, rows: list[dict[str, Any]]) -> None:
    """One JSON object per line, written atomically."""
    atomic_write(path, "".join(json_text(row) + "\n" for row in rows))


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's content; a missing, unreadable or damaged file is one error naming it (json's own message names
    a line and column only)."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable JSON file ({exc})") from None


def sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def file_record(path: str | os.PathLike, lines: bool = False) -> dict[str, Any]:
    """What a kept file must still hold: its size and sha256, and, with `lines`, its number of lines (a truncated
    history is then named by the rows it lost, not only by a hash)."""
    path = Path(path)
    record: dict[str, Any] = {"bytes": path.stat().st_size, "sha256": sha256(path)}
    if lines:
        with open(path, "rb") as fh:
            record["lines"] = sum(1 for _ in fh)
    return record


def folder_records(folder: str | os.PathLike, leave_out: tuple[str, ...] = (), lines: tuple[str, ...] = ()
                   ) -> dict[str, dict[str, Any]]:
    """file_record of every file under `folder` (by its path relative to it, sorted), but those named in `leave_out`;
    the files named in `lines` with their line counts."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {name: file_record(p, lines=name in lines) for p in files
            if (name := p.relative_to(folder).as_posix()) not in leave_out}


def mismatch(folder: str | os.PathLike, records: dict[str, dict[str, Any]]) -> str | None:
    """None when every file of `records` (folder_records' form) is under `folder` as recorded, else what differs,
    naming the first file that does: missing, of another size or line count, or of other content."""
    folder = Path(folder)
    for name, want in sorted(records.items()):
        path = folder / name
        if not path.is_file():
            return f"{path}: missing"
        have = file_record(path, lines="lines" in want)
        if "lines" in want and have["lines"] != want["lines"]:
            return f"{path}: {have['lines']} lines, its record says {want['lines']}"
        if have["bytes"] != want["bytes"]:
            return f"{path}: {have['bytes']} bytes, its record says {want['bytes']}"
        if have["sha256"] != want["sha256"]:
            return f"{path}: its content differs from the recorded sha256"
    return None


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of each non-blank line of a jsonl file. A line that is not a JSON object is one ValueError
    naming the file and the line, so a corrupt file is found where it is corrupt, not where a row is first used."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found")
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line.rstrip(b"\r\n"))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg}, column {exc.colno})") from None
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{number}: not UTF-8 text ({exc.reason})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            yield number, row


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every row of a jsonl file (errors as `iter_jsonl`'s)."""
    return [row for _, row in iter_jsonl(path)]
