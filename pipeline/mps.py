"""A private CUDA MPS daemon for the processes a stage runs at once (`runtime.mps`): with several processes on one GPU,
their kernels then run at the same time instead of taking turns. pipeline.gpus starts one around its pool; the
daemons a killed stage left behind are quit by the next stage that starts one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


MPS_PREFIX = "cory-mps-"


QUIT_GRACE, QUIT_TIMEOUT = 10, 60
"""Seconds the MPS daemon waits for its clients before it forces its servers down, and seconds it is given to quit."""


def quit_mps_daemon(control: str, env: dict) -> bool:
    """Tell the MPS daemon whose pipe folder `env` names (CUDA_MPS_PIPE_DIRECTORY) to quit, forcing its servers down
    after QUIT_GRACE seconds (`quit -t`): a plain `quit` waits for every client, and once waited past a 60 s limit after
    a benchmark's pool had terminated its clients, which raised at the end of the benchmark's finished work. Returns
    whether the daemon quit; one that does not is left for quit_stale_mps_daemons, never an error."""
    try:
        done = subprocess.run([control], input=f"quit -t {QUIT_GRACE}\n", env=env, capture_output=True, text=True,
                              timeout=QUIT_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def quit_stale_mps_daemons(control: str, who: str = "train") -> None:
    """Quit the MPS daemons that earlier stages left behind when they were killed (SIGKILL or SIGTERM skip the
    `finally` that quits them) or that did not quit in time: each daemon's temporary folder names the stage process that started it, and those
    whose process is gone are quit and removed. A daemon of a stage still running (another profile, say) stays."""
    for folder in Path(tempfile.gettempdir()).glob(f"{MPS_PREFIX}*"):
        try:
            owner = int((folder / "owner").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(owner, 0)
            continue  # its stage is still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # another user's process
        if quit_mps_daemon(control, {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe")}):
            shutil.rmtree(folder, ignore_errors=True)
            print(f"[{who}] runtime.mps: quit the MPS daemon a killed stage left ({folder})", flush=True)


@contextmanager
def mps_daemon(enabled: bool, who: str = "train"):
    """A private CUDA MPS daemon for the duration of the block (runtime.mps), so that processes started inside it
    share each GPU's compute at once; its pipe and log folders go into a temporary folder named by
    CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY, which worker processes inherit. Not enabled, or no
    `nvidia-cuda-mps-control` on PATH, or a daemon that does not start: the block runs without (and says so).
    Yields whether the daemon runs (its clients name GPUs differently: `worker_gpus`). `who` names the stage in what
    it prints. A daemon that does not quit afterwards is said and left with its folder, for the next stage to quit."""
    control = shutil.which("nvidia-cuda-mps-control") if enabled else None
    if enabled and control is None:
        print(f"[{who}] runtime.mps: nvidia-cuda-mps-control is not on PATH; the processes take turns on the GPU",
              flush=True)
    if control is None:
        yield False
        return
    quit_stale_mps_daemons(control, who)
    tmp = tempfile.mkdtemp(prefix=MPS_PREFIX)
    env = {"CUDA_MPS_PIPE_DIRECTORY": f"{tmp}/pipe", "CUDA_MPS_LOG_DIRECTORY": f"{tmp}/log"}
    for folder in env.values():
        os.makedirs(folder)
    Path(tmp, "owner").write_text(str(os.getpid()))
    daemon_env = {**os.environ, **env}
    start = subprocess.run([control, "-d"], env=daemon_env, capture_output=True, text=True)
    if start.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"[{who}] runtime.mps: the MPS daemon did not start ({(start.stderr or start.stdout).strip()}); the "
              "processes take turns on the GPU", flush=True)
        yield False
        return
    print(f"[{who}] runtime.mps: the processes share each GPU through a CUDA MPS daemon", flush=True)
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield True
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        started = time.perf_counter()
        if quit_mps_daemon(control, daemon_env):  # how long it took is said: it counts in the stage's time
            shutil.rmtree(tmp, ignore_errors=True)
            print(f"[{who}] runtime.mps: the MPS daemon quit in {time.perf_counter() - started:.1f} s", flush=True)
        else:
            print(f"[{who}] runtime.mps: the MPS daemon did not quit; left running ({tmp}), the next stage that "
                  "starts one quits it", flush=True)
