"""What every stage script shares: running a stage, the CPU threads, the device checks, small file writers and the
stage timer. `params` is always the typed tree, pipeline.params.Params (this module is below it: params imports it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

from cory import files
from cory.hf import progress_bars_on_terminal_only
from cory.schema import ConfigError
from pipeline.paths import ROOT, out_dir, shown
from pipeline.single_writer import StageLocked, end_with_parent, started_by_dvc


def limit_cpu_threads() -> None:
    """One CPU thread for torch in this process, unless $OMP_NUM_THREADS asks for another number (torch reads it).

    What computes on the CPU is the smoke profile's tiny models (with a GPU, the CPU only feeds it): a second
    intra-op thread hardly speeds them up, and on a busy machine threads that wait for each other's cores slow them
    down. Measured on the project's 2-core CPU machine (torch's default there is 2 threads), seconds, default vs 1:
    stages base_model@imdb_small + reward_model + train + evaluate of the smoke profile, idle 80-82 vs 83, beside two
    busy processes 195 and 260 vs 126 and 124; `pytest tests/test_pipeline_smoke.py`, idle 214 vs 216, beside two
    busy processes 428 vs 329. The variable is set for child processes too; the train stage's pool workers take their
    own share of the cores (pipeline.gpus.share_cpus)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:  # imported already, so it has read the variable before it was set
        sys.modules["torch"].set_num_threads(1)


class UnitsFailed(RuntimeError):
    """Some of a stage's units (runs, models) failed, each said as it failed; the message names them, one a line."""


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage's main(); bad input (settings, missing or malformed files) and a profile another stage is writing
    end it with one line naming them, failed units with one line each; in an experiment (`dvc exp run`), a failure
    also says what the experiment left changed and how to restore it (experiment_left). A stage DVC started ends with
    DVC (pipeline.single_writer.end_with_parent). A params file the stage read that changed while it ran fails the
    stage at its end, with one line, so that DVC records no params the outputs were not made with
    (pipeline.params_files)."""
    if started_by_dvc():
        end_with_parent()
    limit_cpu_threads()
    progress_bars_on_terminal_only()  # a stage's log reads top to bottom: no bar frames where it is not a terminal
    left = experiment_left(main.__module__ == "pipeline.params")
    try:
        main()
    except (ConfigError, FileNotFoundError, ValueError, StageLocked, UnitsFailed) as exc:
        sys.exit(f"error: {str(exc).rstrip('.')}. {left}" if left else f"error: {exc}")
    except BaseException as exc:  # a crash keeps its traceback; the experiment's state is said after it
        if left and not (isinstance(exc, SystemExit) and exc.code in (0, None)):
            print(left, file=sys.stderr)
        raise
    from pipeline.params_files import changed_since_read

    changed = [shown(path) for path in changed_since_read()]
    if changed:
        sys.exit(f"error: {', '.join(changed)} changed while the stage ran, which read it at its start: its outputs "
                 "were made with the settings it read, so the stage fails before DVC records the new ones; run it "
                 "again")


def experiment_left(params_stage: bool) -> str | None:
    """What a failed `dvc exp run` in the workspace has changed and the commands that restore the last commit, or
    None outside one (DVC sets $DVC_EXP_BASELINE_REV in an experiment's stages; `--temp` runs in a copy under
    .dvc/tmp/exps/, which it deletes). The params stage runs first: only params.yaml has changed then. A later stage
    fails after DVC has removed its outputs and recorded the stages before it in dvc.lock; `dvc checkout --force`
    brings the committed outputs back from the cache."""
    if not os.environ.get("DVC_EXP_BASELINE_REV") or "/.dvc/tmp/exps/" in ROOT.as_posix():
        return None
    if params_stage:
        return ("`dvc exp run` leaves this experiment's -S values in params.yaml: `git checkout params.yaml` takes "
                "them back (`dvc exp run --temp` never touches the workspace)")
    return ("`dvc exp run` has changed params.yaml (its -S values) and dvc.lock (the stages it ran), and removed this "
            "stage's outputs: `git checkout params.yaml dvc.lock && dvc checkout --force` restores the last commit's "
            "(`dvc exp run --temp` never touches the workspace)")


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


write_json = files.write_json
"""Indented JSON, written atomically (cory.files: the one writer of every record, summary and metrics file)."""
write_jsonl = files.write_jsonl


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a file an earlier stage wrote (cory.files.read_jsonl: a bad line names the file and line)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: file not found (did its DVC stage run?)")
    return files.read_jsonl(path)


def peak_memory() -> dict[str, float | None]:
    """Peak resident host memory of this process and of its largest finished child (the train stage's workers), and
    peak GPU memory this process allocated, in GiB (None without a GPU); the report's time table states them."""
    import resource

    rss = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    gpu = None
    if "torch" in sys.modules:
        import torch

        gpu = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    return {"peak_rss_gib": round(rss / 2**20, 2), "peak_gpu_gib": None if gpu is None else round(gpu, 2)}


def process_started_at() -> float | None:
    """When this process started (Unix seconds, to 0.01 s), from Linux's /proc; None where there is none."""
    import time

    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


class stage_timer:
    """Write outputs/<profile>/metrics/timing/<stage>.json with the stage's wall time, its start and end (Unix
    seconds), when its process started (the time before the start is the process's own: Python, imports, the checks
    before the stage's work) and its peak memory (the report's time table)."""

    def __init__(self, params, stage: str):
        self.path = out_dir(params, "metrics", "timing", f"{stage.replace('@', '-')}.json")
        self.stage = stage

    def __enter__(self) -> "stage_timer":
        import time

        self.start, self.started_at = time.perf_counter(), time.time()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        import time

        if exc_type is None:  # with the clock times, the report finds what ran between the stages (DVC, process start)
            process = process_started_at()
            write_json(self.path, {"stage": self.stage, "seconds": round(time.perf_counter() - self.start, 2),
                                   "started_at": round(self.started_at, 1), "finished_at": round(time.time(), 1),
                                   "process_started_at": None if process is None else round(process, 1),
                                   **peak_memory()})


def driver_sees_gpu() -> bool:
    """Whether the NVIDIA driver sees a GPU (libcuda's device count, within CUDA_VISIBLE_DEVICES), without importing
    torch: on the GPU machine importing torch is about 3 s of a stage process's start."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            driver = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return False
    count = ctypes.c_int(0)
    return driver.cuInit(0) == 0 and driver.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def require_device(params, computes: bool = True) -> None:
    """Stop a stage at its start when the profile needs a GPU (`runtime.device: cuda`) and torch sees none, or, for
    a stage that does not compute (`computes` false: the data stages, which never import torch), the NVIDIA driver
    sees none; a GPU that the driver sees and torch cannot use stops the first stage that computes.

    The message says how many RL runs the profile trains and how long its last measured repro took where
    (pipeline.durations), and the smoke profile's. Stages call this before they read or write anything, and their
    committed metrics are `persist: true` in dvc.yaml, so the failed `dvc repro` leaves every result as it was. The
    report stage does not call it: it rebuilds the figures from run files on any machine."""
    if params.runtime.device != "cuda":
        return
    if computes:
        import torch

        seen, who = torch.cuda.is_available(), "torch"
    else:
        seen, who = driver_sees_gpu(), "the NVIDIA driver"
    if not seen:
        from pipeline.durations import repro_time

        runs = sum(len(jobs) for jobs in params.jobs.values())
        took, smoke = repro_time(params.profile), repro_time("smoke")
        measured = f": {took.what} {took.text()}" if took else ""
        smoke = f" ({smoke.text()})" if smoke else ""
        raise ConfigError(
            f"runtime.device: the {params.profile!r} profile needs a CUDA GPU and {who} sees none (its {runs} RL "
            f"runs are sized for a GPU{measured}). On a machine without a GPU run the smoke profile{smoke}: "
            "`python -m pipeline.profile smoke && dvc repro`; to run this profile here anyway: "
            "`dvc exp run -S runtime.device=auto`."
        )
