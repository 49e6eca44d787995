"""An interrupted experiment loses nothing it had: a run whose settings changed (another fingerprint) trains beside its
older version, which stays in place, whole, until the new run has finished; interrupted, the older version is what
the outputs still hold (kept as soon as the settings are back), and the new one resumes from its checkpoint when the
experiment runs again; a kill while the new run takes its place is finished by the next plan."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cory.files import mismatch
from cory.rl.checkpoint import checkpoint_extra
from cory.rl.config import CORYConfig, GenerationConfig, PPOConfig, TrainConfig
from cory.rl.trainer import Trainer
from cory.runs.config import Job, TaskConfig
from pipeline.train import run_job
from pipeline.units import NEXT, OLD, finished_summary, plan, promote, remove_stale
from tiny import tiny_lm, tiny_tokenizer


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> TaskConfig:
    root = tmp_path_factory.mktemp("task")
    tiny_lm(n_embd=32).save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    rows = [{"question": q, "answer": f"#### {i % 3}"} for i, q in enumerate(["the movie", "a film was"] * 8)]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return TaskConfig(model=str(root / "model"), prompts=str(root / "prompts.jsonl"), reward="math")


def job(task: TaskConfig, where: Path, fingerprint: str, learning_rate: float = 3e-3) -> Job:
    ppo = PPOConfig(learning_rate=learning_rate, batch_size=4, mini_batch_size=4,
                    generation=GenerationConfig(response_length=(3, 4), repetition_penalty=1.0))
    train = TrainConfig(iterations=5, samples_to_log=2, ppo=ppo, cory=CORYConfig(n_agents=1))
    return Job("g", "r", 0, train, task, task.model, str(where / "runs/g/r/seed0"), True,
               str(where / "checkpoints/g/r/seed0"), fingerprint=fingerprint)


def train(one: Job, interrupt_at: int | None = None) -> dict | None:
    """pipeline.train.run_job with checkpoints every 2 iterations; with `interrupt_at`, Ctrl-C in that iteration."""
    torch.set_num_threads(1)
    real_step = Trainer.step

    def step(self, *args, **kwargs):
        if self.iteration == interrupt_at:
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)

    Trainer.step = step
    try:
        return run_job(one, "test", 1, 2, {"g": "math"}, 10)
    except KeyboardInterrupt:
        return None
    finally:
        Trainer.step = real_step


def contents(folder: str) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def test_an_interrupted_experiment_keeps_the_runs_it_had_and_its_new_runs_replace_them_once_finished(task, tmp_path):
    baseline = job(task, tmp_path, "f1")
    train(baseline)
    had = contents(baseline.run_dir), contents(baseline.checkpoint_dir)

    changed = job(task, tmp_path, "f2", learning_rate=1e-3)  # the experiment's settings: another fingerprint
    done, todo, replacing = plan([changed], checkpoint_extra)
    assert done == {} and replacing == 1 and todo[0].run_dir == changed.run_dir + NEXT
    assert train(todo[0], interrupt_at=3) is None  # Ctrl-C: its checkpoint after iteration 1 in force
    assert (contents(baseline.run_dir), contents(baseline.checkpoint_dir)) == had  # nothing it had is lost
    assert finished_summary(baseline) is not None  # the settings back: the run is kept as it was

    done, todo, replacing = plan([changed], checkpoint_extra)  # the experiment again: it resumes beside
    assert done == {} and replacing == 1 and todo[0].run_dir == changed.run_dir + NEXT
    summary = train(todo[0])
    assert summary["resumed_after"] == 1 and summary["fingerprint"] == "f2"
    assert finished_summary(changed) is not None and finished_summary(baseline) is None  # replaced, once finished
    assert mismatch(changed.checkpoint_dir, summary["saved_files"]) is None
    siblings = sorted(p.name for root in ("runs", "checkpoints") for p in (tmp_path / root / "g/r").iterdir())
    assert siblings == ["seed0", "seed0"]  # no staged or set-aside folder left


def test_a_kill_while_a_new_run_takes_its_place_is_finished_by_the_next_plan(task, tmp_path, monkeypatch):
    """Killed after the new run's checkpoint folder took its place and the older run folder was set aside, before
    the new run folder was renamed: the folder set aside is removed as stale, and the plan puts the finished new
    run in place and keeps it."""
    import pipeline.train as stage

    baseline, changed = job(task, tmp_path, "f1"), job(task, tmp_path, "f2", learning_rate=1e-3)
    train(baseline)
    staged = plan([changed], checkpoint_extra)[1][0]
    monkeypatch.setattr(stage, "promote", lambda one: None)  # the run finishes; the stage puts it in place below
    train(staged)
    promote(replace(staged, run_dir=changed.run_dir))  # promote's first half: the checkpoint folder
    Path(changed.run_dir).rename(changed.run_dir + OLD)  # its second half, killed once the older run is aside
    removed = remove_stale(tmp_path / "runs", [changed], ["g"], "run_dir") + \
        remove_stale(tmp_path / "checkpoints", [changed], ["g"], "checkpoint_dir")
    assert removed == ["g/r/seed0" + OLD]
    done, todo, replacing = plan([changed], checkpoint_extra)
    assert list(done) == ["g/r/seed0"] and todo == [] and done["g/r/seed0"]["fingerprint"] == "f2"
    assert not Path(changed.run_dir + NEXT).exists() and not Path(changed.checkpoint_dir + NEXT).exists()


def test_a_run_with_nothing_in_its_place_trains_in_place(task, tmp_path):
    fresh = job(task, tmp_path, "f1")
    done, todo, replacing = plan([fresh], checkpoint_extra)
    assert todo == [fresh] and replacing == 0
    killed = replace(fresh)
    assert train(killed, interrupt_at=3) is None  # killed before it finished: its own checkpoint, in place
    assert plan([killed], checkpoint_extra)[1] == [killed]
