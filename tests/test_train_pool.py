"""The train stage's pool: runs spread over the visible GPUs (pipeline.gpus), started longest first (pipeline.schedule),
and one failed run stops only itself; a run out of GPU memory beside others runs again."""

import os
from types import SimpleNamespace

import pytest

import pipeline.gpus as sharing
import pipeline.schedule as schedule


def test_a_failed_run_stops_alone_and_is_named():
    jobs = [SimpleNamespace(name=f"g/run{i}/seed0") for i in range(3)]

    def run_job(job, *settings):
        if job.name == "g/run1/seed0":
            raise RuntimeError("CUDA out of memory. Tried to allocate 946.00 MiB\nmore detail")
        return {"run": job.name}

    summaries, failed = schedule.run_all(run_job, jobs, ("profile",), workers=1, gpus=[])
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
    from pipeline.train import run_job

    summaries, failed = schedule.run_all(run_job, jobs, ("test", 1, 0, {"g": "math"}), workers=2, gpus=[])
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
    with pytest.raises(schedule.ConfigError, match="runtime.executor: ray needs the ray package"):
        schedule.run_on_ray(None, [], (), workers=1)


def test_the_first_wave_of_runs_is_at_most_half_compiled_runs_and_the_rest_longest_first():
    """The full profile's runs on 12 slots: its math runs (ppo.speed.compile, the math group's and the math sweep's)
    are among the longest, but at most 6 of them start at once, the costliest; the longest uncompiled runs fill the other slots, and the rest go longest
    first."""
    from cory.runs.config import expand_jobs
    from pipeline.paths import ROOT
    from pipeline.params import validate
    from pipeline.profile import render

    full = render("full")  # more compiled runs than half the slots; not whichever params.yaml holds
    tree = validate(full)
    jobs = [job for group, exp in tree.experiments.items()
            for job in expand_jobs(group, exp, tree.tasks[exp.task], full["train"], tree.seeds, ROOT / "runs")]

    def compiles(job):
        return bool(job.train.ppo.speed.compile)

    order = schedule.start_order(jobs, slots=12)
    assert sorted(job.name for job in order) == sorted(job.name for job in jobs)
    first, later = order[:12], order[12:]
    compiled = [job for job in first if compiles(job)]
    assert len(compiled) == 6 and sum(map(compiles, jobs)) > 6
    assert min(map(schedule.cost, compiled)) >= max(schedule.cost(job) for job in later if compiles(job))
    uncompiled_later = [schedule.cost(job) for job in later if not compiles(job)]
    assert min(schedule.cost(job) for job in first if not compiles(job)) >= max(uncompiled_later)
    assert [schedule.cost(job) for job in later] == sorted(map(schedule.cost, later), reverse=True)
    # with slots for half the runs or more, or without compiled runs, the order is plain longest first
    longest_first = sorted(map(schedule.cost, jobs), reverse=True)
    assert [schedule.cost(job) for job in schedule.start_order(jobs, slots=len(jobs) // 2)] == longest_first
    plain = [job for job in jobs if not compiles(job)]
    assert [schedule.cost(job) for job in schedule.start_order(plain, 12)] == sorted(map(schedule.cost, plain), reverse=True)


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
    assert schedule.cost(replace(job, model=str(large))) > schedule.cost(replace(job, model=str(small))) > schedule.cost(job)


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
