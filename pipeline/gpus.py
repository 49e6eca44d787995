"""How the stages that train several models at once share the machine: GPUs, GPU memory, CPU cores and a CUDA MPS
daemon.

The train stage runs its runs in a pool of `runtime.workers` processes per GPU (`run_at_once`), placed by the GPU
memory each needs where it knows it, and the base_models and evaluate stages their models; the processes are spawned
and replaced where one ends (pipeline.workers), each pinned to one GPU round-robin (`worker_pool`) and given an equal
share of the cores (`share_cpus`), and, with several processes on one GPU, run under a private MPS daemon
(pipeline.mps.mps_daemon), so that their kernels run at the same time instead of taking turns.

What the benchmarks use to share a machine as the stages do is imported from here: `share_cpus`, `mps_daemon`,
`visible_gpus`, `worker_gpus`.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import traceback
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable

from pipeline.mps import mps_daemon
from pipeline.single_writer import end_with_parent
from pipeline.workers import WorkerDied, WorkerPool, cuda_error


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


def start_worker(workers: int, gpus: list[str], slot: int) -> None:
    """Pool initializer: the worker ends with the stage process that started it (a killed stage leaves no run
    training, pipeline.single_writer); its slot in the pool picks its GPU (set before CUDA starts in it, so the process
    sees that GPU alone, as cuda:0; a worker that replaces an ended one takes its slot), then share_cpus, and torch's
    deterministic flags where the stage asked for them (deterministic_kernels)."""
    end_with_parent()
    gpu = gpu_of_worker(slot, gpus)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    share_cpus(workers)
    deterministic_torch()


def worker_pool(processes: int, gpus: list[str]) -> WorkerPool:
    """`processes` worker processes (pipeline.workers: spawned, replaced where one ends), each pinned to one of `gpus`
    round-robin (as worker_gpus names them) and given its share of the cores."""
    return WorkerPool(processes, start_worker, (processes, gpus))


def gpu_free_memory(gpu: str) -> float | None:
    """The free memory of `gpu` (as CUDA_VISIBLE_DEVICES names it: an index or a UUID) in GiB, as the driver reports
    it (nvidia-smi, so that the stage's own process starts no CUDA context); None where it cannot be read."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", gpu],
                              capture_output=True, text=True, timeout=30, check=True)
        return float(done.stdout.split()[0]) / 1024
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def where(exc: BaseException) -> str:
    """Where in a run it failed, as the run marked its exception (cory.runs.run: the iteration; cory.rl.trainer's
    PhaseTimer: the phase, e.g. generation, scoring, update), or ""."""
    iteration, phase = getattr(exc, "iteration", None), getattr(exc, "phase", None)
    parts = ([f"iteration {iteration}"] if iteration is not None else []) + ([phase] if phase else [])
    return f" in {', '.join(parts)}" if parts else ""


def error_line(exc: BaseException) -> str:
    """A failed unit's error in one line: its type, where in the run it happened, and the first line of its
    message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}{where(exc)}: {text[0] if text else ''}"


def out_of_memory(exc: BaseException) -> bool:
    """Whether a unit failed for want of GPU memory (torch's OutOfMemoryError, or CUDA's own "out of memory", which a
    process that cannot even create its context under a full GPU raises): a failure that fewer processes at once may
    not meet. A worker process that the host's out-of-memory killer ended is not (WorkerDied): its host, not its GPU,
    was out of memory."""
    import torch

    if isinstance(exc, WorkerDied):
        return False
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def release_memory_after(function: Callable, *args):
    """function(*args) in a worker process, after which the process gives back the GPU memory the call held: torch's
    caching allocator keeps freed blocks reserved for the process that freed them, so a worker whose run has ended
    (or ran out of memory) would otherwise hold its run's peak while idle, and the next call on the GPU, in whichever
    worker, would find it full. A failed call's frames are cleared first: its exception's traceback refers to them,
    and through their locals to the run's tensors. After a CUDA error the context is unusable and the worker ends
    (pipeline.workers): nothing is given back through it."""
    poisoned = False
    try:
        return function(*args)
    except BaseException as error:
        poisoned = cuda_error(error)
        seen = error
        while seen is not None:
            traceback.clear_frames(seen.__traceback__)
            seen = seen.__cause__ or seen.__context__
        raise
    finally:
        gc.collect()
        trees = sys.modules.get("torch._inductor.cudagraph_trees")
        if trees is not None:
            # torch.compile keeps a call's CUDA graphs (its decoding steps') and their memory pool after its models are
            # gone, since dynamo caches by code (pytorch/pytorch#104095): the next call would count them as its own
            trees.reset_cudagraph_trees()
        torch = sys.modules.get("torch")
        if not poisoned and torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def say_failure(name: str, exc: BaseException, who: str) -> None:
    """One line as a unit fails: out of GPU memory in short (torch's message, its first part), else FAILED and the
    error, with what follows for a CUDA error or a killed worker; whether it runs again, the caller says."""
    if out_of_memory(exc):
        print(f"[{who}] {name} ran out of GPU memory: {error_line(exc).split('. GPU')[0]}", flush=True)
    elif cuda_error(exc):
        print(f"[{who}] {name} FAILED: {error_line(exc)} (its worker process is replaced; a run resumes from its last "
              "checkpoint when the stage runs again)", flush=True)
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


MARGIN = 0.1
"""The share of a GPU's free memory that placement by memory leaves unplanned (`run_at_once`'s `needs`): what the
estimates and the processes' CUDA contexts do not account for."""


@dataclass
class Lane:
    """One pool's calls (one GPU's, or all of them on one pool): those not started yet (`queue`, in the calls' order;
    `again` first, the calls that ran out of memory), how many may run at once (`limit`, at most the pool's `size`),
    the calls that ran out of memory and have not ended since (`short`: waiting in `again` or running again), and,
    placing by memory, the GiB its calls may need in all (`budget`)."""

    pool: object
    size: int
    queue: deque
    budget: float | None = None
    limit: int = field(init=False)
    again: list = field(default_factory=list)
    short: set = field(default_factory=set)

    def __post_init__(self):
        self.limit = self.size


def run_at_once(calls: dict[str, tuple[Callable, tuple]], processes: int, gpus: list[str], mps: bool, who: str,
                costs: dict[str, float] | None = None, needs: dict[str, float] | None = None,
                free_memory: Callable[[str], float | None] = gpu_free_memory,
                on_done: Callable[[str, object], None] | None = None) -> tuple[list, dict[str, str]]:
    """Run `calls` ({name: (function, arguments)}, started in this order) in `processes` worker processes spread over
    `gpus`, under a CUDA MPS daemon where `mps` asks for one and more processes than GPUs share them; returns (results
    in the order they end, {name: error line} of the calls that failed). The functions must be importable by name
    (spawned workers unpickle them). A worker killed while it runs a call (the host's out-of-memory killer) or that
    met a CUDA error fails that call alone and is replaced (pipeline.workers); `on_done(name, result)` hears of each
    call that ends well, as it ends (and may change `needs`).

    Placed by count (no `needs`): a call that ran out of GPU memory (`out_of_memory`) beside others is not final: its
    pool then runs one call fewer at once (as many as still run), and the call starts again, before any call not yet
    started, as soon as one of them ends (the train stage's runs continue from their last checkpoint), but only while
    no other call that ran out of memory runs again: those are the large calls, and two of them started again together
    run out of memory beside each other again. Once no call that ran out of memory waits or runs, the pool runs as
    many at once as it did at first. Out of memory alone is final.

    Placed by memory (`needs`: {name: GiB it holds at its peak}, on GPUs whose free memory `free_memory` reads): a
    call starts when the needs of the calls running on its GPU and its own fit the GPU's free memory at the pool's
    start less MARGIN, the first in order that fits (a small call does not wait behind a large one that does not fit
    yet), and a call too large for the GPU when it is alone starts alone. One that runs out of memory beside others
    starts again, first once it fits, its need doubled (whichever call's need was short, the doubling stands until a
    call of its kind ends and `on_done` sets what it measured); out of memory alone is final.

    Each call runs under `release_memory_after`, so an ended call's memory is the GPU's again, not its idle worker's.
    With `costs` ({name: estimated cost}) and several GPUs, each GPU gets a pool of its own share of the processes and
    the calls `assign_to_gpus` gives it; otherwise one pool pinned round-robin, each call to whichever worker is free
    (placed by count only where that pool spans several GPUs)."""
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
        lanes = []
        for g, pool in enumerate(pools):
            free = free_memory(gpus[g]) if needs is not None and len(pools) == len(gpus) else None
            budget = None if free is None else free * (1 - MARGIN)
            if budget is not None:
                print(f"[{who}] GPU {gpus[g]}: {free:.1f} GiB free; runs start as their peaks fit {budget:.1f} GiB",
                      flush=True)
            lanes.append(Lane(pool, size, deque(name for name in calls if gpu_of[name] == g), budget))
        order = {name: i for i, name in enumerate(calls)}
        running: dict[Future, tuple[str, Lane]] = {}

        def in_flight(lane: Lane) -> int:
            return sum(1 for _, of in running.values() if of is lane)

        def running_again(lane: Lane) -> bool:
            return any(name in lane.short for name, of in running.values() if of is lane)

        def room(lane: Lane) -> float:
            return lane.budget - sum(needs.get(name, 0.0) for name, of in running.values() if of is lane)

        def fits(lane: Lane, name: str) -> bool:
            return lane.budget is None or in_flight(lane) == 0 or needs.get(name, 0.0) <= room(lane)

        def next_call(lane: Lane) -> str | None:
            if lane.budget is not None:  # by memory: the first that fits, those that ran out of memory first
                name = next((n for n in [*lane.again, *lane.queue] if fits(lane, n)), None)
                if name is not None:
                    (lane.again if name in lane.again else lane.queue).remove(name)
                return name
            if lane.again and not running_again(lane):
                return lane.again.pop(0)
            return lane.queue.popleft() if lane.queue else None

        def fill(lane: Lane) -> None:
            while in_flight(lane) < lane.limit:
                name = next_call(lane)
                if name is None:
                    break
                function, args = calls[name]
                running[lane.pool.submit(release_memory_after, function, *args)] = (name, lane)

        def again(lane: Lane, name: str, beside: int) -> None:
            """A call that ran out of memory beside `beside` others, started again: by memory, once it fits, its need
            doubled (at most the GPU's budget: then alone); by count, with the pool's limit at what still runs."""
            lane.again = sorted([*lane.again, name], key=order.get)
            if lane.budget is not None:
                needs[name] = min(2 * needs.get(name, 1.0), lane.budget)
                print(f"[{who}] {name} again once {needs[name]:.1f} GiB are free for it", flush=True)
                return
            lane.limit = beside
            lane.short.add(name)
            print(f"[{who}] {name} again once one of the {beside} beside it ends; now at most {lane.limit} at once",
                  flush=True)

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
                    if on_done is not None:
                        on_done(name, results[-1])
                    continue
                say_failure(name, error, who)
                beside = in_flight(lane)
                if out_of_memory(error) and beside > 0:
                    again(lane, name, beside)
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
