"""The train stage's pool: runs spread over the visible GPUs (pipeline.gpus), and one failed run stops only itself."""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import pipeline.gpus as sharing
import pipeline.train as train


def test_workers_go_round_robin_over_the_gpus():
    gpus = ["0", "1"]
    assert [sharing.gpu_of_worker(i, gpus) for i in range(5)] == ["0", "1", "0", "1", "0"]
    assert sharing.gpu_of_worker(3, []) is None


@pytest.mark.parametrize("listed, expected", [("0,1", ["0", "1"]), ("2", ["2"]), ("", []), ("-1", []),
                                              ("GPU-a1, GPU-b2", ["GPU-a1", "GPU-b2"])])
def test_visible_gpus_follow_cuda_visible_devices(monkeypatch, listed, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
    assert sharing.visible_gpus() == expected


@pytest.mark.parametrize("workers, share, parallel", [(3, 5, "true"), (12, 1, "false"), (32, 1, "false")])
def test_each_worker_gets_its_share_of_the_cores(monkeypatch, workers, share, parallel):
    """torch's threads, the tokenizer's pool (off at one core) and torch.compile's workers: 16 cores / workers."""
    import torch

    monkeypatch.setattr(sharing.os, "sched_getaffinity", lambda pid: set(range(16)))
    for name in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS"):
        monkeypatch.delenv(name, raising=False)  # and restored afterwards
    threads = torch.get_num_threads()
    try:
        sharing.share_cpus(workers)
        assert torch.get_num_threads() == share
    finally:
        torch.set_num_threads(threads)
    assert os.environ["TOKENIZERS_PARALLELISM"] == parallel
    assert os.environ["RAYON_NUM_THREADS"] == os.environ["TORCHINDUCTOR_COMPILE_THREADS"] == str(share)


@pytest.mark.parametrize("gpus", [["2"], ["2", "3"], ["GPU-a1", "GPU-b2"], ["0", "1"]])
def test_under_mps_workers_name_their_gpu_within_the_daemons_set(gpus):
    # the daemon sees the stage's GPUs as 0..n-1; a worker asking MPS for "2" of a one-GPU set hangs
    assert sharing.worker_gpus(gpus, under_mps=True) == [str(i) for i in range(len(gpus))]
    assert sharing.worker_gpus(gpus, under_mps=False) == gpus


def test_a_failed_run_stops_alone_and_is_named(monkeypatch):
    jobs = [SimpleNamespace(name=f"g/run{i}/seed0") for i in range(3)]

    def run_job(job, *settings):
        if job.name == "g/run1/seed0":
            raise RuntimeError("CUDA out of memory. Tried to allocate 946.00 MiB\nmore detail")
        return {"run": job.name}

    monkeypatch.setattr(train, "run_job", run_job)
    summaries, failed = train.run_all(jobs, ("profile",), workers=1, gpus=[])
    assert [s["run"] for s in summaries] == ["g/run0/seed0", "g/run2/seed0"]  # the run after the failure still ran
    assert failed == {"g/run1/seed0": "RuntimeError: CUDA out of memory. Tried to allocate 946.00 MiB"}


def test_the_process_pool_collects_every_failure(monkeypatch, tmp_path):
    """Two worker processes (spawned, as on a GPU machine) each get a run whose prompt file is missing: both
    failures come back named, neither stops the other."""
    from cory.rl.config import TrainConfig
    from cory.runs.config import Job, TaskConfig

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    task = TaskConfig(model="unused", prompts=str(tmp_path / "missing.jsonl"), reward="math")
    jobs = [Job("g", f"run{i}", 0, TrainConfig(), task, "unused", str(tmp_path / f"run{i}"), False) for i in range(2)]
    summaries, failed = train.run_all(jobs, ("test", 1, 0, {"g": "math"}), workers=2, gpus=[])
    assert summaries == []
    assert sorted(failed) == ["g/run0/seed0", "g/run1/seed0"]
    assert all(error.startswith("FileNotFoundError") and "missing.jsonl" in error for error in failed.values())


def test_ray_executor_without_ray_is_one_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(train.ConfigError, match="runtime.executor: ray needs the ray package"):
        train.run_on_ray([], (), workers=1)


def fake_mps_control(tmp_path, monkeypatch, exit_code=0, quit_hangs=False):
    """An `nvidia-cuda-mps-control` on PATH that logs each call (its arguments, stdin, pipe folder) and exits so
    (or, with quit_hangs, never answers a quit)."""
    log = tmp_path / "calls.log"
    program = tmp_path / "bin" / "nvidia-cuda-mps-control"
    program.parent.mkdir()
    program.write_text(f'#!/bin/sh\nif [ "$1" = "-d" ]; then echo "start $CUDA_MPS_PIPE_DIRECTORY" >> {log}; '
                       f'else read line; echo "$line $CUDA_MPS_PIPE_DIRECTORY" >> {log}; sleep {30 if quit_hangs else 0}; fi\n'
                       f'exit {exit_code}\n')
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{program.parent}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    return log


def test_mps_daemon_runs_for_the_block_and_its_pipe_folder_reaches_the_workers(tmp_path, monkeypatch, capsys):
    log = fake_mps_control(tmp_path, monkeypatch)
    with sharing.mps_daemon(True) as running:
        assert running
        pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]  # what spawned workers inherit
        assert Path(pipe).is_dir() and log.read_text().split() == ["start", pipe]
    assert log.read_text().splitlines() == [f"start {pipe}", f"quit -t 10 {pipe}"]  # stopped after, through the same pipe
    assert "[train] runtime.mps: the MPS daemon quit in " in capsys.readouterr().out  # in the stage's time: said
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ and not Path(pipe).exists()


def test_mps_daemon_off_or_failing_runs_the_block_without_it(tmp_path, monkeypatch, capsys):
    log = fake_mps_control(tmp_path, monkeypatch, exit_code=1)
    with sharing.mps_daemon(False) as running:
        assert not running and "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    assert not log.exists()
    with sharing.mps_daemon(True) as running:  # the daemon fails to start: said, and the block runs without MPS
        assert not running and "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    assert log.read_text().split()[0] == "start" and "did not start" in capsys.readouterr().out
    monkeypatch.setenv("PATH", "/nonexistent")
    with sharing.mps_daemon(True):
        assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    assert "not on PATH" in capsys.readouterr().out


def test_a_daemon_that_does_not_quit_is_left_for_the_next_stage_and_the_block_ends_well(tmp_path, monkeypatch, capsys):
    # seen on an H100: a benchmark's pool had terminated its MPS clients and a plain `quit` outwaited its time limit,
    # which raised after the benchmark's work was done
    log = fake_mps_control(tmp_path, monkeypatch, quit_hangs=True)
    monkeypatch.setattr(sharing, "QUIT_TIMEOUT", 1)
    monkeypatch.setattr(sharing.tempfile, "gettempdir", lambda: str(tmp_path))
    with sharing.mps_daemon(True, who="base_models"):
        pipe = Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"])
    assert log.read_text().splitlines() == [f"start {pipe}", f"quit -t 10 {pipe}"]
    assert "[base_models] runtime.mps: the MPS daemon did not quit" in capsys.readouterr().out
    assert (pipe.parent / "owner").read_text() == str(os.getpid())  # its folder stays, for quit_stale_mps_daemons
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ


def test_a_daemon_that_a_killed_stage_left_is_quit_before_a_new_one_starts(tmp_path, monkeypatch):
    import subprocess
    import sys

    log = fake_mps_control(tmp_path, monkeypatch)
    monkeypatch.setattr(sharing.tempfile, "gettempdir", lambda: str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale, running = tmp_path / f"{sharing.MPS_PREFIX}stale", tmp_path / f"{sharing.MPS_PREFIX}running"
    for folder, owner in ((stale, dead.stdout.strip()), (running, str(os.getpid()))):
        (folder / "pipe").mkdir(parents=True)
        (folder / "owner").write_text(owner)
    with sharing.mps_daemon(True):
        pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
    assert log.read_text().splitlines() == [f"quit -t 10 {stale / 'pipe'}", f"start {pipe}", f"quit -t 10 {pipe}"]
    assert not stale.exists() and running.exists()  # a daemon whose stage still runs is left alone


def test_the_first_wave_of_runs_is_at_most_half_compiled_runs_and_the_rest_longest_first():
    """The default profile's runs on 12 slots: its math runs (ppo.speed.compile) are among the longest, but at most 6
    of them start at once, the costliest; the longest uncompiled runs fill the other slots, and the rest go longest
    first."""
    from cory.runs.config import expand_jobs
    from pipeline.paths import ROOT
    from pipeline.params import validate
    from pipeline.profile import render

    default = render("default")  # the profile this test means, not whichever params.yaml holds
    tree = validate(default)
    jobs = [job for group, exp in tree.experiments.items()
            for job in expand_jobs(group, exp, tree.tasks[exp.task], default["train"], tree.seeds, ROOT / "runs")]

    def compiles(job):
        return bool(job.train.ppo.speed.compile)

    order = train.start_order(jobs, slots=12)
    assert sorted(job.name for job in order) == sorted(job.name for job in jobs)
    first, later = order[:12], order[12:]
    compiled = [job for job in first if compiles(job)]
    assert len(compiled) == 6 and sum(map(compiles, jobs)) > 6
    assert min(map(train.cost, compiled)) >= max(train.cost(job) for job in later if compiles(job))
    uncompiled_later = [train.cost(job) for job in later if not compiles(job)]
    assert min(train.cost(job) for job in first if not compiles(job)) >= max(uncompiled_later)
    assert [train.cost(job) for job in later] == sorted(map(train.cost, later), reverse=True)
    # with slots for half the runs or more, or without compiled runs, the order is plain longest first
    longest_first = sorted(map(train.cost, jobs), reverse=True)
    assert [train.cost(job) for job in train.start_order(jobs, slots=len(jobs) // 2)] == longest_first
    plain = [job for job in jobs if not compiles(job)]
    assert [train.cost(job) for job in train.start_order(plain, 12)] == sorted(map(train.cost, plain), reverse=True)


def test_a_runs_cost_grows_with_its_model_and_batch(tmp_path):
    """A 135M model's run costs more than a 30M one's at the same shape: the model folder's weights count."""
    from dataclasses import replace

    small, large = tmp_path / "small", tmp_path / "large"
    for folder, size in ((small, 120), (large, 538)):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"0" * size)
    from cory.runs.config import expand_jobs
    from pipeline.params import validate
    from pipeline.profile import render

    params = render("default")
    tree = validate(params)
    exp = tree.experiments["imdb"]
    job = expand_jobs("imdb", exp, tree.tasks[exp.task], params["train"], tree.seeds, tmp_path)[0]
    assert train.cost(replace(job, model=str(large))) > train.cost(replace(job, model=str(small))) > train.cost(job)


class FakeGPU:
    """Units on threads that see how many run at once (the real pool is the test above's): unit(name) raises torch's
    OutOfMemoryError where more run at once than `fits[name]` allows (itself included), else holds until `ends(name)`.
    `tries` lists (name, how many ran at once as it started); `when(name, n)` waits for name's n-th start and
    `failed(name, n)` until the pool has taken in its n-th failure, so that a test ends units in reaction to what the
    pool did, not after sleeps (a loaded CI machine has other timings)."""

    def __init__(self, monkeypatch, fits: dict[str, int], first_wave: int):
        import threading
        from concurrent.futures import ThreadPoolExecutor

        import torch  # noqa: F401 - imported here, before the threads: torch's first import is not thread-safe

        monkeypatch.setattr(sharing, "worker_pool", lambda processes, gpus: ThreadPoolExecutor(processes))
        self.fits, self.now, self.tries, self.failures = fits, 0, [], []
        self.changed = threading.Condition()
        say_failure = sharing.say_failure

        def seen_failing(name, exc, who):  # the pool has taken in this failure: it sets its limit before it waits again
            say_failure(name, exc, who)
            with self.changed:
                self.failures.append(name)
                self.changed.notify_all()

        monkeypatch.setattr(sharing, "say_failure", seen_failing)
        # no full collection after every unit (release_memory_after's, seconds in a process that has torch loaded):
        # these units hold no memory, and the test of release_memory_after runs the real one
        monkeypatch.setattr(sharing.gc, "collect", lambda: 0)
        self.first_wave = threading.Barrier(first_wave)  # the first wave all in before any looks at how many run
        self.release: dict = {}

    def ends(self, name: str) -> None:
        import threading

        with self.changed:
            self.release.setdefault(name, threading.Event()).set()

    def _wait(self, seen, what: str) -> None:
        with self.changed:
            assert self.changed.wait_for(seen, 10.0), f"{what}: {self.tries}"

    def when(self, name: str, n: int) -> None:
        """Wait for name's n-th start."""
        self._wait(lambda: [t for t, _ in self.tries].count(name) >= n, f"{name} did not start a {n}th time")

    def failed(self, name: str, n: int) -> None:
        """Wait until the pool has seen name fail n times."""
        self._wait(lambda: self.failures.count(name) >= n, f"{name} was not seen failing {n} times")

    def unit(self, name: str) -> str:
        import threading

        import torch

        with self.changed:
            self.now += 1
            self.tries.append((name, self.now))
            first = len(self.tries) <= self.first_wave.parties
            event = self.release.setdefault(name, threading.Event())
            self.changed.notify_all()
        try:
            if first:
                self.first_wave.wait(10)
            with self.changed:
                crowded = self.now > self.fits.get(name, 99)
            if crowded:
                raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 2.00 GiB ({name})")
            assert event.wait(10), f"{name} was never let end"
            return name
        finally:
            with self.changed:
                self.now -= 1
                self.changed.notify_all()


def test_calls_that_ran_out_of_gpu_memory_run_again_fewer_at_once_and_one_at_a_time(monkeypatch, capsys):
    """A GPU where b fits beside at most one other call and c only alone: each call that ran out of memory beside
    others starts again as soon as one of them ends, before the calls not yet started, but not while another call
    that ran out of memory runs again (c waits while b runs again, and e takes the place d leaves); the pool runs
    one fewer at once after each; every call ends, and nothing is said to have failed."""
    import threading

    gpu = FakeGPU(monkeypatch, {"b": 2, "c": 1}, first_wave=4)

    def releaser():
        gpu.failed("b", 1), gpu.failed("c", 1)
        gpu.ends("a")  # b again, beside d only: it fits
        gpu.when("b", 2)
        gpu.ends("d")  # b runs again: c waits, e starts
        gpu.when("e", 1)
        gpu.ends("b")  # c again, beside e: out of memory again
        gpu.failed("c", 2)
        gpu.ends("e")  # c alone
        gpu.when("c", 3)
        gpu.ends("c")
        gpu.when("f", 1)
        gpu.ends("f")

    threading.Thread(target=releaser, daemon=True).start()
    results, failed = sharing.run_at_once({n: (gpu.unit, (n,)) for n in "abcdef"}, 4, [], False, "train")
    assert sorted(results) == list("abcdef") and failed == {}
    names = [name for name, _ in gpu.tries]
    assert set(names[:4]) == set("abcd")  # 4 at once: b and c out of memory
    assert names[4:] == ["b", "e", "c", "c", "f"]  # b again before e's first start; c not beside the restarted b
    assert [n for name, n in gpu.tries if name == "c"][1:] == [2, 1]  # beside e (out of memory again), then alone
    said = capsys.readouterr().out
    assert "[train] b ran out of GPU memory: OutOfMemoryError: CUDA out of memory." in said
    assert said.count("again once one of the") == 3 and "FAILED" not in said


def test_once_every_call_that_ran_out_of_memory_has_ended_the_pool_runs_as_many_at_once_again(monkeypatch, capsys):
    """b fits only alone: it runs out of memory beside a, c, d, then beside c and d, then beside d, then runs alone;
    once it has ended, e, f, g and h, which fit beside each other, run four at once again."""
    import threading

    gpu = FakeGPU(monkeypatch, {"b": 1}, first_wave=4)

    def releaser():
        for name, failures in zip("acd", (1, 2, 3)):
            gpu.failed("b", failures)
            gpu.ends(name)
        gpu.when("b", 4)
        gpu.ends("b")
        for name in "efgh":
            gpu.when(name, 1)
        for name in "efgh":
            gpu.ends(name)

    threading.Thread(target=releaser, daemon=True).start()
    results, failed = sharing.run_at_once({n: (gpu.unit, (n,)) for n in "abcdefgh"}, 4, [], False, "train")
    assert sorted(results) == list("abcdefgh") and failed == {}
    assert [n for name, n in gpu.tries if name == "b"][1:] == [3, 2, 1]  # after the first wave's 4: one fewer each time
    assert max(n for name, n in gpu.tries if name in "efgh") == 4  # all four started before any was let end
    said = capsys.readouterr().out
    assert said.count("again once one of the") == 3
    assert "every call that ran out of memory has ended: 4 at once again" in said



def test_a_call_leaves_nothing_of_its_own_alive_and_gives_back_the_gpu_memory_it_held(monkeypatch):
    """release_memory_after: a failed call's locals die with it, though its exception lives on (the traceback no
    longer holds its frames), and where CUDA is running in the process the allocator's cache is emptied after every
    call, failed or not."""
    import weakref

    import torch

    emptied, alive = [], []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))

    class Activations:
        pass

    def unit(fail):
        held = Activations()
        alive.append(weakref.ref(held))
        if fail:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return "done"

    assert sharing.release_memory_after(unit, False) == "done" and emptied == [True]
    with pytest.raises(torch.OutOfMemoryError) as caught:
        sharing.release_memory_after(unit, True)
    assert caught.value is not None and alive[1]() is None and emptied == [True, True]


def test_other_failures_and_out_of_memory_alone_are_final(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    pools, tries = [], []
    monkeypatch.setattr(sharing, "worker_pool", lambda processes, gpus: pools.append(processes) or
                        ThreadPoolExecutor(processes))

    def unit(name):
        tries.append(name)
        if name == "nan":
            raise FloatingPointError("non-finite loss")
        if name == "huge":  # CUDA's own words, as a process raises them when it cannot create its context
            raise RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")
        return name

    results, failed = sharing.run_at_once({"huge": (unit, ("huge",))}, 3, [], False, "evaluate")
    assert results == [] and tries == ["huge"]  # alone from the start: final at once
    assert failed == {"huge": "RuntimeError: CUDA error: out of memory"}
    tries.clear()
    results, failed = sharing.run_at_once({n: (unit, (n,)) for n in ("ok", "nan", "huge")}, 3, [], False, "evaluate")
    assert results == ["ok"] and pools == [3, 3]  # one pool for every try
    assert tries.count("nan") == 1 and 1 <= tries.count("huge") <= 2  # huge again if it failed beside another
    assert failed == {"nan": "FloatingPointError: non-finite loss", "huge": "RuntimeError: CUDA error: out of memory"}
    assert sharing.out_of_memory(RuntimeError("CUDA error: out of memory")) and not sharing.out_of_memory(ValueError("x"))


def test_a_call_out_of_memory_is_said_in_short_and_not_as_failed(capsys):
    error = RuntimeError("CUDA out of memory. Tried to allocate 55.92 GiB. GPU 0 has a total capacity of 139.80 GiB "
                         "of which 26.42 GiB is free. Process 520 has 56.43 GiB in use.")
    sharing.say_failure("call2", error, "check")
    sharing.say_failure("call3", FloatingPointError("non-finite loss"), "check")
    said = capsys.readouterr().out
    assert said == ("[check] call2 ran out of GPU memory: RuntimeError: CUDA out of memory. Tried to allocate 55.92 GiB\n"
                    "[check] call3 FAILED: FloatingPointError: non-finite loss\n")


# --------------------------------------------------------------------------------------------------------------------
# Several GPUs: each GPU's own pool and its share of the runs, by their estimated costs
# --------------------------------------------------------------------------------------------------------------------


def test_the_longest_calls_go_to_different_gpus_and_the_loads_end_within_one_call():
    costs = [850, 850, 850, 510, 510, 510, 176, 176, 176, 86, 86, 86] + [100] * 16 + [40] * 8
    gpu_of = sharing.assign_to_gpus(costs, 2)
    loads = [sum(c for c, g in zip(costs, gpu_of) if g == gpu) for gpu in (0, 1)]
    assert abs(loads[0] - loads[1]) <= max(costs)  # LPT: the busiest GPU within one call of the others
    assert gpu_of[0] != gpu_of[1] and len({gpu_of[i] for i in (0, 1, 2)}) == 2  # the three longest spread
    assert sharing.assign_to_gpus(costs, 1) == [0] * len(costs)
    assert sharing.assign_to_gpus(costs, 2) == gpu_of  # deterministic: ties go to the lower GPU


def simulate(durations: list[float], gpu_of: list[int], slots: int) -> float:
    """When the last call ends: each GPU starts its calls in the given order, `slots` at a time, a call starting when
    one of its GPU's slots frees up (fake durations: what a run takes beside the others)."""
    ends = []
    for gpu in set(gpu_of):
        free = [0.0] * slots
        for duration, g in zip(durations, gpu_of):
            if g == gpu:
                start = min(free)
                free[free.index(start)] = start + duration
        ends.append(max(free))
    return max(ends)


def test_on_two_gpus_the_stage_ends_near_the_bound_however_the_runs_are_ordered():
    """Fake durations like the default profile's (three long SmolLM2 CORY runs, math CORY, many IMDB runs), 16 slots
    per GPU: the stage ends within the longest run of the lower bound max(longest, work / slots), where one pool whose
    free workers take any run can put the three longest on one GPU (the GPU is shared by its runs, so a GPU's load, not
    its slots, is what a run waits on: modelled here as the slots of its own pool)."""
    durations = sorted([850.0] * 3 + [510.0] * 3 + [176.0] * 6 + [86.0] * 6 + [100.0] * 24 + [40.0] * 12, reverse=True)
    gpu_of = sharing.assign_to_gpus(durations, 2)
    bound = max(max(durations), sum(durations) / (2 * 16))
    assert simulate(durations, gpu_of, 16) <= bound + max(durations)
    loads = [sum(d for d, g in zip(durations, gpu_of) if g == gpu) for gpu in (0, 1)]
    assert max(loads) - min(loads) <= max(durations) and {gpu_of[0], gpu_of[1]} == {0, 1}


def test_with_costs_and_several_gpus_each_gpu_gets_a_pool_of_its_own_runs(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    pools = []

    def pool(processes, gpus):
        pools.append((processes, list(gpus)))
        return ThreadPoolExecutor(processes)

    monkeypatch.setattr(sharing, "worker_pool", pool)
    seen = []
    calls = {name: (seen.append, (name,)) for name in ("long", "short", "mid", "tiny")}
    costs = {"long": 10.0, "short": 2.0, "mid": 5.0, "tiny": 1.0}
    results, failed = sharing.run_at_once(calls, 4, ["0", "1"], False, "train", costs)
    assert failed == {} and sorted(seen) == sorted(calls)
    assert pools == [(2, ["0"]), (2, ["1"])]  # 2 processes per GPU, each pool pinned to its GPU
    pools.clear()
    sharing.run_at_once(calls, 4, ["0", "1"], False, "train")  # without costs: one pool over both GPUs
    assert pools == [(4, ["0", "1"])]


def _torch_flags() -> tuple[bool, bool, bool]:
    """(deterministic algorithms, warn only, Inductor's deterministic mode) of the process it runs in."""
    import torch
    import torch._inductor.config as inductor

    return (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            bool(inductor.deterministic))


@pytest.fixture
def torch_flags_restored(monkeypatch):
    """The test's flags and variables undone afterwards (they are per process: the other tests run with them off)."""
    import torch
    import torch._inductor.config as inductor

    for name in (sharing.DETERMINISTIC, "CUBLAS_WORKSPACE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    before = _torch_flags(), torch.utils.deterministic.fill_uninitialized_memory
    yield
    torch.use_deterministic_algorithms(before[0][0], warn_only=before[0][1])
    inductor.deterministic = before[0][2]
    torch.utils.deterministic.fill_uninitialized_memory = before[1]


@pytest.mark.parametrize("strict", [True, False])
def test_deterministic_kernels_reach_the_spawned_workers(torch_flags_restored, strict):
    """runtime.deterministic: the stage's process and the pool's spawned workers (torch's flags are per process)
    compute with deterministic algorithms, strict in the base_models stage, warning elsewhere; cuBLAS on a fixed
    workspace; uninitialized memory not filled."""
    import torch

    sharing.deterministic_kernels(True, strict=strict)
    expected = (True, not strict, True)
    assert _torch_flags() == expected
    assert torch.utils.deterministic.fill_uninitialized_memory is False
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    with sharing.worker_pool(1, []) as pool:
        assert pool.submit(_torch_flags).result() == expected


def test_deterministic_kernels_off_changes_nothing(torch_flags_restored):
    before = _torch_flags()
    sharing.deterministic_kernels(False)
    assert _torch_flags() == before and sharing.DETERMINISTIC not in os.environ
    with sharing.worker_pool(1, []) as pool:
        assert pool.submit(_torch_flags).result()[0] is False
