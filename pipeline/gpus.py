"""How the stages that train several models at once share the machine: GPUs, CPU cores and a CUDA MPS daemon.

The train stage runs `runtime.workers` runs per GPU at once, and the base_models stage its models at once; both
start their processes with `spawn` (CUDA cannot be used in forked children), pin each to one GPU round-robin
(`worker_pool`), give each an equal share of the cores (`share_cpus`) and, with several processes
on one GPU, run them under a private MPS daemon (`mps_daemon`), so that their kernels run at the same time instead
of taking turns.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipeline.single_writer import end_with_parent


def share_cpus(workers: int) -> None:
    """In each of `workers` processes sharing one machine: an equal share of the cores for torch's CPU thread pool, the
    tokenizer's thread pool and torch.compile's workers, so that 14 processes do not run 14 x 16 threads on 16 cores (as
    torchrun sets OMP_NUM_THREADS=1). A share of one core turns the tokenizer's pool off. Where the share is larger
    (the base_models stage's three processes on 16 cores: 5 each) the tokenizer uses it: one process tokenizing the
    IMDB corpus took about 9 s on one core and 5 on two (a 2-core CPU machine); on an H100 machine the IMDB base models'
    preparation fell from 24-26 s to 11-12 s, though not the stage's time, which the GPU bounds. Called in every worker
    before it does any work."""
    import torch

    share = max(1, len(os.sched_getaffinity(0)) // workers)  # the cores this process may use (taskset, cgroup cpusets)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if share > 1 else "false"
    os.environ.setdefault("RAYON_NUM_THREADS", str(share))  # the tokenizer's pool (read when it first starts)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(share))  # torch.compile's workers (read when it starts)
    torch.set_num_threads(share)


DETERMINISTIC = "CORY_DETERMINISTIC"
"""Set by deterministic_kernels in a stage ("strict" or "warn"), so that the worker processes it spawns set torch's
flags too."""


def deterministic_kernels(on: bool, strict: bool = False) -> None:
    """runtime.deterministic, in a stage that computes, before its first CUDA work: cuBLAS on a fixed workspace
    (CUBLAS_WORKSPACE_CONFIG; otherwise the reduction order of a matmul may vary), torch's deterministic algorithms
    where an op has one, and with them Inductor's deterministic mode, which never picks a kernel by timing candidates
    whose numerics differ (under MPS, with 16 runs sharing the GPU, the timings and so the choices varied from repro
    to repro). `strict` (the base models' training: plain transformer ops) makes every op deterministic, flash
    attention's backward included, and an op that has no deterministic kernel an error; otherwise such an op warns
    and runs (the RL runs' decoding and update use ops beyond that set; their sequences are short enough that flash
    attention's backward sums at most two blocks per element, in either order the same). torch's uninitialized-memory
    fill, which the flag turns on, stays off: every buffer this project reads is written first. The settings are
    inherited by the stage's spawned workers, which set torch's flags in start_worker (a Ray worker, in
    pipeline.train.on_ray_worker)."""
    if not on:
        return
    os.environ[DETERMINISTIC] = "strict" if strict else "warn"
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    deterministic_torch()


def deterministic_torch() -> None:
    """torch's part of deterministic_kernels, in this process (flags are per process), as $CORY_DETERMINISTIC asks."""
    mode = os.environ.get(DETERMINISTIC)
    if mode not in ("strict", "warn"):
        return
    import torch
    import torch._inductor.config as inductor

    torch.use_deterministic_algorithms(True, warn_only=mode == "warn")
    torch.utils.deterministic.fill_uninitialized_memory = False
    inductor.deterministic = True  # torch sets it with the flag too; older versions read it from here only


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


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (indices, or UUIDs if it lists those)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [gpu.strip() for gpu in listed.split(",") if gpu.strip() and gpu.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def worker_gpus(gpus: list[str], under_mps: bool) -> list[str]:
    """How worker processes name `gpus` (the stage's CUDA_VISIBLE_DEVICES) in their own CUDA_VISIBLE_DEVICES. Under an
    MPS daemon a client's CUDA_VISIBLE_DEVICES counts within the daemon's visible set, which is the stage's: the
    positions 0..n-1. (A physical index there, "1" when the stage sees only GPU 1, is not a valid GPU to MPS: the
    client hangs, seen on a four-GPU machine with CUDA_VISIBLE_DEVICES=1.) Without MPS, the names themselves."""
    return [str(position) for position in range(len(gpus))] if under_mps else gpus


def processes_at_once(workers: int, gpus: list[str]) -> int:
    """How many worker processes a stage runs at once: `workers` per visible GPU, or `workers` in all without one."""
    return workers * max(1, len(gpus))


def gpu_of_worker(index: int, gpus: list[str]) -> str | None:
    """The GPU of the index-th worker process: workers go round-robin over the GPUs, so `runtime.workers` runs per
    GPU share each one (None without a GPU)."""
    return gpus[index % len(gpus)] if gpus else None


def start_worker(workers: int, counter, gpus: list[str]) -> None:
    """Pool initializer: the worker ends with the stage process that started it (a killed stage leaves no run
    training, pipeline.single_writer); the next worker index from the shared counter picks this process's GPU (set
    before CUDA starts in it, so the process sees that GPU alone, as cuda:0), then share_cpus, and torch's
    deterministic flags where the stage asked for them (deterministic_kernels)."""
    end_with_parent()
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    gpu = gpu_of_worker(index, gpus)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    share_cpus(workers)
    deterministic_torch()


def worker_pool(processes: int, gpus: list[str]) -> ProcessPoolExecutor:
    """`processes` worker processes (spawned: CUDA cannot be used in forked children), each pinned to one of `gpus`
    round-robin (as worker_gpus names them) and given its share of the cores."""
    context = multiprocessing.get_context("spawn")
    counter = context.Value("i", 0)
    return ProcessPoolExecutor(processes, mp_context=context, initializer=start_worker,
                               initargs=(processes, counter, gpus))


def error_line(exc: BaseException) -> str:
    """A failed unit's error in one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def out_of_memory(exc: BaseException) -> bool:
    """Whether a unit failed for want of GPU memory (torch's OutOfMemoryError, or CUDA's own "out of memory", which a
    process that cannot even create its context under a full GPU raises): a failure that fewer processes at once may
    not meet."""
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def release_memory_after(function: Callable, *args):
    """function(*args) in a worker process, after which the process gives back the GPU memory the call held: torch's
    caching allocator keeps freed blocks reserved for the process that freed them, so a worker whose run has ended
    (or ran out of memory) would otherwise hold its run's peak while idle, and the next call on the GPU, in whichever
    worker, would find it full. A failed call's frames are cleared first: its exception's traceback refers to them,
    and through their locals to the run's tensors."""
    try:
        return function(*args)
    except BaseException as error:
        seen = error
        while seen is not None:
            traceback.clear_frames(seen.__traceback__)
            seen = seen.__cause__ or seen.__context__
        raise
    finally:
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def say_failure(name: str, exc: BaseException, who: str) -> None:
    """One line as a unit fails: out of GPU memory in short (torch's message, its first part), else FAILED and the
    error; whether it runs again, the caller says."""
    if out_of_memory(exc):
        print(f"[{who}] {name} ran out of GPU memory: {error_line(exc).split('. GPU')[0]}", flush=True)
    else:
        print(f"[{who}] {name} FAILED: {error_line(exc)}", flush=True)


def assign_to_gpus(costs: list[float], n_gpus: int) -> list[int]:
    """The GPU (0..n_gpus-1) of each call, from its estimated cost: longest first, each to the GPU with the least
    cost so far (LPT scheduling: the busiest GPU ends within one call's cost of the others, and the longest calls
    land on different GPUs instead of wherever a free worker process happens to be)."""
    load, gpu_of = [0.0] * n_gpus, [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        gpu = min(range(n_gpus), key=lambda g: (load[g], g))
        gpu_of[i], load[gpu] = gpu, load[gpu] + costs[i]
    return gpu_of


@dataclass
class Lane:
    """One pool's calls (one GPU's, or all of them on one pool): those not started yet (`queue`, in the calls' order;
    `again` first, the calls that ran out of memory), how many may run at once (`limit`, at most the pool's `size`)
    and the calls that ran out of memory and have not ended since (`short`: waiting in `again` or running again)."""

    pool: object
    size: int
    queue: deque
    limit: int = field(init=False)
    again: list = field(default_factory=list)
    short: set = field(default_factory=set)

    def __post_init__(self):
        self.limit = self.size


def run_at_once(calls: dict[str, tuple[Callable, tuple]], processes: int, gpus: list[str], mps: bool, who: str,
                costs: dict[str, float] | None = None) -> tuple[list, dict[str, str]]:
    """Run `calls` ({name: (function, arguments)}, started in this order) in `processes` worker processes spread over
    `gpus`, under a CUDA MPS daemon where `mps` asks for one and more processes than GPUs share them; returns (results
    in the order they end, {name: error line} of the calls that failed). The functions must be importable by name
    (spawned workers unpickle them).

    A call that ran out of GPU memory (`out_of_memory`) beside others is not final: its pool then runs one call fewer
    at once (as many as still run), and the call starts again, before any call not yet started, as soon as one of
    them ends (the train stage's runs continue from their last checkpoint), but only while no other call that ran out
    of memory runs again: those are the large calls, and two of them started again together run out of memory beside
    each other again, while the calls not yet started keep the pool's other places. Out of memory alone is final.
    Once no call that ran out of memory waits or runs, the pool runs as many at once as it did at first: the calls
    that did not fit beside the others were the ones the lower limit made room for. Each call runs under
    `release_memory_after`, so an ended call's memory is the GPU's again, not its idle worker's. So a GPU smaller
    than the one a profile's `runtime.workers` was chosen for costs some time, not runs, and a long call that did not
    fit at first does not wait for every other call to end.

    With `costs` ({name: estimated cost}) and several GPUs, each GPU gets a pool of its own share of the processes and
    the calls `assign_to_gpus` gives it; otherwise one pool pinned round-robin, each call to whichever worker is free."""
    results, failed = [], {}
    with mps_daemon(mps and bool(gpus) and processes > len(gpus), who=who) as under_mps, ExitStack() as stack:
        named = worker_gpus(gpus, under_mps)
        if costs and len(gpus) > 1:
            size = max(1, processes // len(gpus))
            pools = [stack.enter_context(worker_pool(size, [gpu])) for gpu in named]
            gpu_of = dict(zip(calls, assign_to_gpus([costs.get(name, 0.0) for name in calls], len(gpus))))
        else:
            size = processes
            pools, gpu_of = [stack.enter_context(worker_pool(processes, named))], dict.fromkeys(calls, 0)
        lanes = [Lane(pool, size, deque(name for name in calls if gpu_of[name] == g)) for g, pool in enumerate(pools)]
        order = {name: i for i, name in enumerate(calls)}
        running: dict[Future, tuple[str, Lane]] = {}

        def in_flight(lane: Lane) -> int:
            return sum(1 for _, of in running.values() if of is lane)

        def running_again(lane: Lane) -> bool:
            return any(name in lane.short for name, of in running.values() if of is lane)

        def fill(lane: Lane) -> None:
            while in_flight(lane) < lane.limit:
                if lane.again and not running_again(lane):
                    name = lane.again.pop(0)
                elif lane.queue:
                    name = lane.queue.popleft()
                else:
                    break
                function, args = calls[name]
                running[lane.pool.submit(release_memory_after, function, *args)] = (name, lane)

        for lane in lanes:
            fill(lane)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: order[running[f][0]]):
                name, lane = running.pop(future)
                error = future.exception()
                if error is None:
                    results.append(future.result())
                    lane.short.discard(name)
                    continue
                say_failure(name, error, who)
                beside = in_flight(lane)
                if out_of_memory(error) and beside > 0:
                    lane.limit = beside
                    lane.again = sorted([*lane.again, name], key=order.get)
                    lane.short.add(name)
                    print(f"[{who}] {name} again once one of the {beside} beside it ends; now at most "
                          f"{lane.limit} at once", flush=True)
                else:
                    failed[name] = error_line(error)
                    lane.short.discard(name)
            for lane in lanes:
                if not lane.short and lane.limit < lane.size:
                    lane.limit = lane.size
                    print(f"[{who}] every call that ran out of memory has ended: {lane.size} at once again",
                          flush=True)
                fill(lane)
    return results, failed
