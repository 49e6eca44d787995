"""One writer per profile: the stage lock, and stage processes that end with the `dvc` that started them.

Two processes writing one profile's outputs at once (a second `dvc repro` in another checkout of the same folder, a
`python -m pipeline.train` beside a running repro, a train stage left running by a killed `dvc`) delete each other's
run folders as stale, resume each other's checkpoints and interleave rows of one history.csv. So every stage that
writes model or run folders holds an exclusive lock on outputs/<profile>/.stage.lock for its whole run (`stage_lock`):
a second one fails at once with one line naming the holder (its pid, command and start, which the holder writes into
the file). The kernel releases the lock when its process ends, however it ends, so a killed stage never leaves it
behind. The file itself stays (it is git-ignored): removing a lock file another process may be opening races.

A stage that DVC started dies with DVC (`end_with_parent`): Linux's parent-death signal (SIGTERM) is set in the stage
process, and in each worker process of its pool (pipeline.gpus), so killing `dvc` alone does not leave a train stage
running whose runs a later repro would train a second time.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from pipeline.paths import out_dir, shown

LOCK = ".stage.lock"
"""The lock file's name under outputs/<profile>/."""

PR_SET_PDEATHSIG, PR_GET_PDEATHSIG = 1, 2
"""prctl(2) options (linux/prctl.h)."""

SHELLS = {"sh", "dash", "bash", "zsh", "fish", "ksh"}
"""Shells that may stand between DVC and a stage: DVC runs a stage's cmd through $SHELL -c, which bash replaces by
the command (exec) but dash does not."""


class StageLocked(RuntimeError):
    """Another stage process writes this profile's outputs: the message names it."""


def holder_line(path: Path) -> str:
    """Who holds the lock at `path`, as its holder wrote it."""
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        holder = {}
    if not holder:
        return "a process that has not written its name yet"
    return (f"the {holder.get('stage', '?')} stage, pid {holder.get('pid', '?')} "
            f"(`{holder.get('command', '?')}`, started {holder.get('started', '?')})")


@contextlib.contextmanager
def stage_lock(params, stage: str):
    """Hold the profile's stage lock for the block (see the module docstring); StageLocked at once if another process
    holds it."""
    path = out_dir(params, LOCK)
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")  # not truncated before the lock is ours: the holder's name is in it
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise StageLocked(f"{shown(path)}: the {params.profile!r} profile's outputs are being written by "
                          f"{holder_line(path)}; wait for it to end, or end it, then run this stage again") from None
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"pid": os.getpid(), "stage": stage, "command": " ".join(sys.orig_argv),
                             "started": time.strftime("%Y-%m-%d %H:%M:%S %z")}) + "\n")
        fh.flush()
        yield path
    finally:
        fh.seek(0)
        fh.truncate()
        fh.close()  # releases the lock


def parent_death_signal() -> int:
    """The signal this process gets when its parent ends (0: none), from prctl(PR_GET_PDEATHSIG)."""
    value = ctypes.c_int(0)
    _libc().prctl(PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0)
    return value.value


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def end_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Have this process get `sig` when its parent ends (Linux; elsewhere nothing, returns False). Where the parent
    is a shell that did not replace itself by the command (dash -c), the shell outlives a killed DVC: the process
    then also watches the shell's parent and ends itself when that one is gone."""
    if not sys.platform.startswith("linux"):
        return False
    if _libc().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        return False
    parent = os.getppid()
    if parent == 1:  # the parent ended before the signal was set: it will never come
        os.kill(os.getpid(), sig)
    if _name(parent) in SHELLS:
        grandparent = _parent_of(parent)
        if grandparent not in (None, 0, 1):
            threading.Thread(target=_watch, args=(grandparent, sig), name="end-with-dvc", daemon=True).start()
    return True


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _watch(pid: int, sig: int, every: float = 2.0) -> None:
    while True:
        time.sleep(every)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os.kill(os.getpid(), sig)
            return
        except PermissionError:
            pass  # alive, another user's


def started_by_dvc() -> bool:
    """Whether DVC started this process: DVC sets DVC_STAGE (the stage's name) and DVC_ROOT (its project's root) for
    every stage command it runs (dvc/stage/run.py; both seen in the environment of a stage of `dvc repro`, DVC 3.67)."""
    return bool(os.environ.get("DVC_STAGE")) and bool(os.environ.get("DVC_ROOT"))
