"""A tiny RL run through `cory.runs.run.run_training` (the resume, fault and shared-LoRA tests): its task fixture (a
tiny model and a prompt file), its job, a kill in the middle of it, and its history without the timings."""

import csv
import json
from contextlib import contextmanager

import pytest

from cory.rl.config import CORYConfig, GenerationConfig, PPOConfig, SpeedConfig, TrainConfig
from cory.rl.trainer import Trainer
from cory.runs.config import Job, TaskConfig

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


WORDS = ["the movie", "a film was", "the plot is", "not very good", "the", "a movie"]


def write_task(root, questions: list[str]) -> TaskConfig:
    """A tiny model and a prompt file of `questions` (math answers "#### 0".."#### 2") under `root`."""
    tiny_lm(n_embd=32).save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    rows = [{"question": q, "answer": f"#### {i % 3}"} for i, q in enumerate(questions)]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return TaskConfig(model=str(root / "model"), prompts=str(root / "prompts.jsonl"), reward="math")


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> TaskConfig:
    return write_task(tmp_path_factory.mktemp("task"), [WORDS[i % len(WORDS)] for i in range(24)])


def job(task: TaskConfig, where, n_agents: int, bf16_weights: bool = False) -> Job:
    ppo = PPOConfig(learning_rate=3e-3, batch_size=8, mini_batch_size=4, init_kl_coef=0.05, use_score_scaling=True,
                    use_score_norm=True, generation=GenerationConfig(response_length=(3, 6), repetition_penalty=1.0),
                    speed=SpeedConfig(bf16_weights=bf16_weights))
    train = TrainConfig(iterations=ITERATIONS, samples_to_log=2, ppo=ppo,
                        cory=CORYConfig(n_agents=n_agents, role_exchange_period=2,
                                        observer_template="{query}:{response}"))
    return Job("g", "r", 0, train, task, task.model, str(where / "run"), True, str(where / "ckpt"), fingerprint="f1")


def history(run_dir) -> list[dict]:
    """history.csv without the wall-clock timing columns."""
    rows = list(csv.DictReader(open(run_dir / "history.csv")))
    return [{k: v for k, v in row.items() if not k.startswith("timing/")} for row in rows]
