"""Faults in the train stage's worker processes, injected into real spawned workers and real (tiny) runs: a CUDA error
is one line naming the run, its iteration and its phase, its worker process is replaced, the other runs go on and
the failed run resumes from its checkpoint; a worker killed by SIGKILL (what the kernel's out-of-memory killer sends)
fails its run alone, named with the signal and the host's memory, and the runs still queued start."""

import csv
import json
import os
import signal
from pathlib import Path

import pytest
import torch

import pipeline.gpus as gpus
from cory.rl.config import CORYConfig, GenerationConfig, PPOConfig, TrainConfig
from cory.runs.config import Job, TaskConfig
from cory.runs.run import run_training
from pipeline.schedule import run_all
from tiny import tiny_lm, tiny_tokenizer

CUDA_ASSERT = "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported"


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> TaskConfig:
    root = tmp_path_factory.mktemp("task")
    tiny_lm(n_embd=32).save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    words = ["the movie", "a film was", "the plot is", "not very good"]
    rows = [{"question": words[i % len(words)], "answer": f"#### {i % 3}"} for i in range(16)]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return TaskConfig(model=str(root / "model"), prompts=str(root / "prompts.jsonl"), reward="math")


def job(task: TaskConfig, where: Path, run: str) -> Job:
    ppo = PPOConfig(learning_rate=3e-3, batch_size=4, mini_batch_size=4, init_kl_coef=0.05,
                    generation=GenerationConfig(response_length=(3, 4), repetition_penalty=1.0))
    train = TrainConfig(iterations=5, samples_to_log=2, ppo=ppo, cory=CORYConfig(n_agents=1))
    return Job("g", run, 0, train, task, task.model, str(where / run / "run"), False, str(where / run / "ckpt"),
               fingerprint="f1")


def accelerator_error(message: str) -> Exception:
    """The exception a CUDA error raises in torch (AcceleratorError where torch has it)."""
    return getattr(torch, "AcceleratorError", RuntimeError)(message)


def run_with_faults(one: Job, *settings) -> dict:
    """pipeline.train.run_job in a worker process, with the fault its run's name asks for: `cuda` raises a CUDA
    device-side assert while scoring iteration 2, `killed` has its process killed by SIGKILL in iteration 2."""
    from cory.rl.trainer import Trainer
    from pipeline.train import run_job

    real_rewards = Trainer._rewards

    def rewards(self, *args, **kwargs):
        if self.iteration == 2 and one.run == "cuda":
            raise accelerator_error(CUDA_ASSERT)
        if self.iteration == 2 and one.run == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        return real_rewards(self, *args, **kwargs)

    Trainer._rewards = rewards
    try:
        return run_job(one, *settings)
    finally:
        Trainer._rewards = real_rewards


def test_a_cuda_error_is_one_line_its_worker_is_replaced_and_the_run_resumes(task, tmp_path, capsys):
    """Two worker processes, three runs: `cuda` fails in iteration 2's scoring (its checkpoint after iteration 1 in
    force); the line names the run, iteration and phase; `a` and `b` finish; the rerun of `cuda` resumes after
    iteration 1 and ends with the history of a run that never failed."""
    jobs = [job(task, tmp_path, name) for name in ("cuda", "a", "b")]
    settings = ("test", 1, 2, {"g": "math"}, 10)
    summaries, failed = run_all(run_with_faults, jobs, settings, workers=2, gpus=[])
    assert sorted(s["run"] for s in summaries) == ["g/a/seed0", "g/b/seed0"]
    assert failed == {"g/cuda/seed0": "AcceleratorError in iteration 2, scoring: CUDA error: device-side assert "
                                      "triggered"}
    lines = [line for line in capsys.readouterr().out.splitlines() if "g/cuda/seed0" in line]
    assert lines == ["[train] g/cuda/seed0 FAILED: AcceleratorError in iteration 2, scoring: CUDA error: device-side "
                     "assert triggered (its worker process is replaced; a run resumes from its last checkpoint when "
                     "the stage runs again)"]
    torch.set_num_threads(1)
    resumed = run_training(jobs[0], "cpu", checkpoint_every=2)
    assert resumed["resumed_after"] == 1
    run_training(job(task, tmp_path / "whole", "cuda"), "cpu", checkpoint_every=2)
    assert history(jobs[0].run_dir) == history(tmp_path / "whole/cuda/run") and len(history(jobs[0].run_dir)) == 5


def history(run_dir) -> list[dict]:
    """history.csv without the wall-clock timing columns."""
    with open(Path(run_dir) / "history.csv") as fh:
        return [{k: v for k, v in row.items() if not k.startswith("timing/")} for row in csv.DictReader(fh)]


def pid_then(fail: str) -> int:
    """This worker's pid, after failing as asked: a CUDA error, another error, or not at all."""
    if fail == "cuda":
        raise accelerator_error(CUDA_ASSERT)
    if fail == "value":
        raise ValueError("a bad value")
    return os.getpid()


def test_a_worker_that_met_a_cuda_error_is_replaced_and_others_are_reused():
    """One worker process: after a CUDA error (its context is unusable) the next call runs in a new process; after
    any other error, or none, in the same one; the CUDA error is also known by its message alone (older torch)."""
    calls = {"first": (pid_then, ("",)), "value": (pid_then, ("value",)), "after value": (pid_then, ("",)),
             "cuda": (pid_then, ("cuda",)), "after cuda": (pid_then, ("",))}
    pids, failed = gpus.run_at_once(calls, 1, [], False, "test")
    assert set(failed) == {"value", "cuda"} and failed["cuda"].startswith("AcceleratorError: CUDA error")
    first, after_value, after_cuda = pids
    assert first == after_value != after_cuda
    assert gpus.cuda_error(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not gpus.cuda_error(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))


def test_a_killed_worker_fails_its_run_alone_and_the_queued_runs_start(task, tmp_path, capsys):
    """Two worker processes and three runs: `killed` dies by SIGKILL in its iteration 2; the pool names it with the
    signal and the host's memory, and `a` and `b` finish (one of them in the process that replaces it)."""
    jobs = [job(task, tmp_path, name) for name in ("killed", "a", "b")]
    summaries, failed = run_all(run_with_faults, jobs, ("test", 1, 2, {"g": "math"}, 10), workers=2, gpus=[])
    assert sorted(s["run"] for s in summaries) == ["g/a/seed0", "g/b/seed0"]
    assert list(failed) == ["g/killed/seed0"]
    assert failed["g/killed/seed0"].startswith("WorkerDied: its worker process was killed by SIGKILL while running "
                                               "it: likely the kernel's out-of-memory killer")
    assert "GiB available now" in failed["g/killed/seed0"]
    said = capsys.readouterr().out
    assert f"[train] g/killed/seed0 FAILED: {failed['g/killed/seed0']}" in said and "Traceback" not in said
    resumed = run_training(jobs[0], "cpu", checkpoint_every=2)  # the stage's rerun: from its checkpoint
    assert resumed["resumed_after"] == 1


def test_a_killed_worker_is_no_gpu_out_of_memory():
    """The host's out-of-memory killer is not the GPU's: a killed run is final, not started again fewer at once."""
    assert not gpus.out_of_memory(gpus.WorkerDied("its worker process was killed by SIGKILL while running it: likely "
                                                  "the kernel's out-of-memory killer, when the host runs out of memory"))
