"""A run killed mid-way resumes from its last checkpoint and ends with the history of an uninterrupted run, bit for bit
(on CPU, where every kernel is deterministic): weights, value heads, Adam, KL controller, score moments, RNGs and the
batch sequence all come back."""

import csv
import json
from contextlib import contextmanager

import pytest
import torch

from cory.rl.config import CORYConfig, GenerationConfig, PPOConfig, SpeedConfig, TrainConfig
from cory.runs.config import Job, TaskConfig
from cory.runs.run import run_training
from cory.rl.trainer import Trainer

from tiny import tiny_lm, tiny_tokenizer

ITERATIONS = 7


@contextmanager
def killed_on_step(monkeypatch, call: int):
    """Trainer.step raises KeyboardInterrupt on its `call`-th call inside the block (a kill mid-run), which the block
    must end with; the real step is back afterwards."""
    real_step, calls = Trainer.step, []

    def dies(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "step", dies)
    with pytest.raises(KeyboardInterrupt):
        yield
    monkeypatch.setattr(Trainer, "step", real_step)


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> TaskConfig:
    root = tmp_path_factory.mktemp("task")
    tiny_lm(n_embd=32).save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    words = ["the movie", "a film was", "the plot is", "not very good", "the", "a movie"]
    rows = [{"question": words[i % len(words)], "answer": f"#### {i % 3}"} for i in range(24)]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return TaskConfig(model=str(root / "model"), prompts=str(root / "prompts.jsonl"), reward="math")


def job(task: TaskConfig, where, n_agents: int, bf16_weights: bool = False) -> Job:
    ppo = PPOConfig(learning_rate=3e-3, batch_size=8, mini_batch_size=4, init_kl_coef=0.05, use_score_scaling=True,
                    use_score_norm=True, generation=GenerationConfig(response_length=(3, 6), repetition_penalty=1.0),
                    speed=SpeedConfig(bf16_weights=bf16_weights))
    train = TrainConfig(iterations=ITERATIONS, samples_to_log=2, ppo=ppo,
                        cory=CORYConfig(n_agents=n_agents, role_exchange_period=2))
    return Job("g", "r", 0, train, task, task.model, str(where / "run"), True, str(where / "ckpt"), fingerprint="f1")


def history(run_dir) -> list[dict]:
    """history.csv without the wall-clock timing columns."""
    rows = list(csv.DictReader(open(run_dir / "history.csv")))
    return [{k: v for k, v in row.items() if not k.startswith("timing/")} for row in rows]


@pytest.mark.parametrize("n_agents, bf16_weights", [(1, False), (2, False), (2, True)])
def test_a_killed_run_resumes_to_the_uninterrupted_history(task, tmp_path, monkeypatch, n_agents, bf16_weights):
    """With ppo.speed.bf16_weights too: the checkpoint holds the fp32 weights, and the bf16 copy is made from them again."""
    torch.set_num_threads(1)
    whole = job(task, tmp_path / "whole", n_agents, bf16_weights)
    phases = run_training(whole, "cpu", checkpoint_every=2)["phase_seconds"]
    # where the wall time went: every phase this run had (no probe, no MLflow tracker), none negative
    assert set(phases) == {"setup", "samples", "iterations", "logging", "checkpoints", "save"}
    assert all(seconds >= 0 for seconds in phases.values()) and phases["iterations"] > 0

    killed = job(task, tmp_path / "killed", n_agents, bf16_weights)
    with killed_on_step(monkeypatch, 6):  # iterations 0-4 done, the checkpoint after iteration 3 in force
        run_training(killed, "cpu", checkpoint_every=2)
    assert len(history(tmp_path / "killed/run")) == 5 and (tmp_path / "killed/ckpt/resume/latest").is_file()
    summary = run_training(killed, "cpu", checkpoint_every=2)

    assert summary["resumed_after"] == 3
    assert history(tmp_path / "killed/run") == history(tmp_path / "whole/run")  # every value, as text
    assert (tmp_path / "killed/run/samples.jsonl").read_text() == (tmp_path / "whole/run/samples.jsonl").read_text()
    for agent in ["llm1", "llm2"][:n_agents]:
        a = (tmp_path / f"whole/ckpt/{agent}/model.safetensors").read_bytes()
        assert (tmp_path / f"killed/ckpt/{agent}/model.safetensors").read_bytes() == a
    assert not (tmp_path / "killed/ckpt/resume").exists()  # a complete run keeps no checkpoint


def test_a_checkpoint_of_another_fingerprint_is_refused(task, tmp_path, monkeypatch):
    first = job(task, tmp_path, 1)
    with killed_on_step(monkeypatch, 4):
        run_training(first, "cpu", checkpoint_every=2)
    first.fingerprint = "f2"
    with pytest.raises(ValueError, match="belongs to another version of g/r/seed0"):
        run_training(first, "cpu", checkpoint_every=2)


@pytest.mark.parametrize("n_agents", [1, 2])
def test_the_probe_leaves_training_as_it_is(task, tmp_path, n_agents):
    """train.probe_every: llm1/probe_task_reward at iterations 0, 3, 6 (and the last), and every other value of the
    history, the samples and the trained weights exactly those of a run without the probe (it samples from a fork of
    the RNG state)."""
    torch.set_num_threads(1)
    plain = job(task, tmp_path / "plain", n_agents)
    run_training(plain, "cpu")
    probed = job(task, tmp_path / "probed", n_agents)
    probed.train.probe_every, probed.train.probe_queries, probed.train.probe_samples = 3, 5, 2
    run_training(probed, "cpu")

    rows = history(tmp_path / "probed/run")
    probes = {int(r["iteration"]): r.pop("llm1/probe_task_reward") for r in rows}
    assert [it for it, v in probes.items() if v != ""] == [0, 3, 6]
    assert all(0.0 <= float(v) <= 1.0 for v in probes.values() if v != "")
    assert rows == history(tmp_path / "plain/run")
    assert (tmp_path / "probed/run/samples.jsonl").read_text() == (tmp_path / "plain/run/samples.jsonl").read_text()
    for agent in ["llm1", "llm2"][:n_agents]:
        a = (tmp_path / f"plain/ckpt/{agent}/model.safetensors").read_bytes()
        assert (tmp_path / f"probed/ckpt/{agent}/model.safetensors").read_bytes() == a
