"""How the stages share the machine (pipeline.gpus, pipeline.mps): workers over the GPUs and their names, each
worker's share of the cores, the CUDA MPS daemon around a pool, several GPUs (each GPU a pool of its own, with its
share of the runs by their estimated costs), and deterministic kernels in the spawned workers."""

import os
from pathlib import Path

import pytest

import pipeline.gpus as sharing
import pipeline.mps as mps


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
    with mps.mps_daemon(True) as running:
        assert running
        pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]  # what spawned workers inherit
        assert Path(pipe).is_dir() and log.read_text().split() == ["start", pipe]
    assert log.read_text().splitlines() == [f"start {pipe}", f"quit -t 10 {pipe}"]  # stopped after, through the same pipe
    assert "[train] runtime.mps: the MPS daemon quit in " in capsys.readouterr().out  # in the stage's time: said
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ and not Path(pipe).exists()


def test_mps_daemon_off_or_failing_runs_the_block_without_it(tmp_path, monkeypatch, capsys):
    log = fake_mps_control(tmp_path, monkeypatch, exit_code=1)
    with mps.mps_daemon(False) as running:
        assert not running and "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    assert not log.exists()
    with mps.mps_daemon(True) as running:  # the daemon fails to start: said, and the block runs without MPS
        assert not running and "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    assert log.read_text().split()[0] == "start" and "did not start" in capsys.readouterr().out
    monkeypatch.setenv("PATH", "/nonexistent")
    with mps.mps_daemon(True):
        assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    assert "not on PATH" in capsys.readouterr().out


def test_a_daemon_that_does_not_quit_is_left_for_the_next_stage_and_the_block_ends_well(tmp_path, monkeypatch, capsys):
    # seen on an H100: a benchmark's pool had terminated its MPS clients and a plain `quit` outwaited its time limit,
    # which raised after the benchmark's work was done
    log = fake_mps_control(tmp_path, monkeypatch, quit_hangs=True)
    monkeypatch.setattr(mps, "QUIT_TIMEOUT", 1)
    monkeypatch.setattr(mps.tempfile, "gettempdir", lambda: str(tmp_path))
    with mps.mps_daemon(True, who="base_models"):
        pipe = Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"])
    assert log.read_text().splitlines() == [f"start {pipe}", f"quit -t 10 {pipe}"]
    assert "[base_models] runtime.mps: the MPS daemon did not quit" in capsys.readouterr().out
    assert (pipe.parent / "owner").read_text() == str(os.getpid())  # its folder stays, for quit_stale_mps_daemons
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ


def test_a_daemon_that_a_killed_stage_left_is_quit_before_a_new_one_starts(tmp_path, monkeypatch):
    import subprocess
    import sys

    log = fake_mps_control(tmp_path, monkeypatch)
    monkeypatch.setattr(mps.tempfile, "gettempdir", lambda: str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale, running = tmp_path / f"{mps.MPS_PREFIX}stale", tmp_path / f"{mps.MPS_PREFIX}running"
    for folder, owner in ((stale, dead.stdout.strip()), (running, str(os.getpid()))):
        (folder / "pipe").mkdir(parents=True)
        (folder / "owner").write_text(owner)
    with mps.mps_daemon(True):
        pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
    assert log.read_text().splitlines() == [f"quit -t 10 {stale / 'pipe'}", f"start {pipe}", f"quit -t 10 {pipe}"]
    assert not stale.exists() and running.exists()  # a daemon whose stage still runs is left alone


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
