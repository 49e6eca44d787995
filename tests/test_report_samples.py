"""Held-out queries (tasks.<task>.held_out): a run never trains on them, and the base model and each trained agent
answer them alone (cory.runs.run); samples.md sets those answers side by side (cory.report.samples)."""

import json

import pytest
import torch

import cory.runs.run as run_module
from cory.report.config import ReportConfig
from cory.report.samples import samples_markdown
from cory.runs.config import TaskConfig
from cory.runs.run import run_training
from cory.schema import ConfigError

from report_fixtures import load_fixture, write_fixture
from run_fixtures import job

HELD_OUT = 4


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> TaskConfig:
    """The resume tests' tiny math task (run_fixtures), with the last HELD_OUT of its 24 prompts held out."""
    from run_fixtures import task as resume_task

    return TaskConfig(**{**vars(resume_task.__wrapped__(tmp_path_factory)), "held_out": HELD_OUT})


def test_held_out_prompts_are_never_trained_on_and_each_agent_answers_them(task, tmp_path, monkeypatch):
    torch.set_num_threads(1)
    drawn = []
    real = run_module.batches
    monkeypatch.setattr(run_module, "batches", lambda n, *args: drawn.append(n) or real(n, *args))
    run_training(job(task, tmp_path, n_agents=2), "cpu")
    assert drawn == [24 - HELD_OUT]  # the batches index the first 20 prompts only
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    held = [r for r in rows if r.get("held_out")]
    prompts = [json.loads(line)["question"] for line in open(task.prompts)][-HELD_OUT:]
    before = [r for r in held if r["iteration"] == -1]
    after = [r for r in held if r["iteration"] == 7]
    assert [r["query"] for r in before] == prompts and {r["pioneer_agent"] for r in before} == {"llm1"}
    assert [(r["pioneer_agent"], r["query"]) for r in after] == [(a, q) for a in ("llm1", "llm2") for q in prompts]
    assert all(0.0 <= r["pioneer_score"] <= 1.0 for r in held)
    assert len([r for r in rows if not r.get("held_out") and r["iteration"] == 7]) == 2  # the fixed queries, as before


def test_too_many_held_out_prompts_stop_the_run_with_one_line(task, tmp_path):
    greedy = TaskConfig(**{**vars(task), "held_out": 24})
    with pytest.raises(ConfigError, match=r"^tasks\.<the task of experiments\.g>\.held_out: holding out 24 of the "
                                          r"24 prompts of .*prompts\.jsonl leaves 0, fewer than the \d+ queries of a "
                                          r"batch"):
        run_training(job(greedy, tmp_path, n_agents=1), "cpu")
    with pytest.raises(ConfigError, match=r"^task\.held_out: must be >= 0, got -1$"):
        TaskConfig(**{**vars(task), "held_out": -1})


def test_samples_md_sets_the_held_out_answers_side_by_side(tmp_path):
    write_fixture(tmp_path, seeds=(0, 1), iterations=6, held_out=32)
    text = samples_markdown(load_fixture(tmp_path), ReportConfig())
    section = text.split("## `imdb`: 32 held-out queries, seed 0", 1)[1]
    assert "| query | base model | imdb/ppo | imdb/cory LLM1 | imdb/cory LLM2 |" in section
    assert "| held-out query 3 | llm1 at -1 on 3 (3.5) | llm1 at 6 on 3 (3.5) | llm1 at 6 on 3 (3.5) | " \
           "llm2 at 6 on 3 (3.5) |" in section
    assert sum(line.startswith("| held-out query") for line in section.splitlines()) == 32
    assert "Mean task reward: base 16, PPO 16, CORY-LLM1 16, CORY-LLM2 16." in section
    # the fixed queries' table leaves the held-out rows out
    assert "held-out query" not in text.split("## `imdb`: 32 held-out")[0]
    plain = tmp_path / "plain"
    write_fixture(plain, seeds=(0,), iterations=4)
    assert "Its runs logged no held-out answers" in samples_markdown(load_fixture(plain), ReportConfig())
