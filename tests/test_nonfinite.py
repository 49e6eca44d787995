"""Every non-finite value meets ppo.on_nonfinite: NaN logits before sampling, a NaN score of the probe or of a logged
sample stop the run naming the iteration, the agent and what was not finite (error); under skip, a logged score is
null (samples.jsonl stays JSON), and mini-batches whose samples were all dropped leave no NaN statistic behind."""

import csv
import json
import math

import pytest
import torch

from cory.rl.config import PPOConfig
from cory.rl.metrics import MetricsWriter
from cory.rl.ppo import NonFiniteError
from cory.rl.trainer import Trainer

from tiny import QUERIES, config, good_word_reward, nan_for_the_second_query, tiny_lm, tiny_tokenizer


def with_ppo(cfg, **changes):
    cfg.ppo = PPOConfig(**{**cfg.ppo.__dict__, **changes})
    return cfg


def strict_json(line: str):
    """A JSON line as any JSON reader reads it: a bare NaN or Infinity is an error."""
    return json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in {line!r}"))


@pytest.mark.parametrize("n_agents", [1, 2])
def test_nan_logits_before_sampling_stop_the_run_naming_the_iteration_the_agent_and_the_logits(n_agents):
    lm = tiny_lm()
    with torch.no_grad():
        lm.transformer.ln_f.weight[3] = float("nan")  # a diverged policy: every position's logits are NaN
    trainer = Trainer(config(n_agents=n_agents), lm, tiny_tokenizer(), good_word_reward)
    with pytest.raises(NonFiniteError, match=r"^iteration 0, llm1 as pioneer: non-finite logits reached the sampler"):
        trainer.step(QUERIES)


def nan_for_the_probe(queries, responses, answers=None):
    """A reward that is NaN for the probe's queries only (the last ones of the prompt list)."""
    scores = good_word_reward(queries, responses)
    return torch.where(torch.tensor([q == "not very" for q in queries]), float("nan"), scores)


def test_a_nan_probe_score_stops_the_run_naming_the_iteration_llm1_and_the_probe():
    trainer = Trainer(config(n_agents=2), tiny_lm(), tiny_tokenizer(), nan_for_the_probe)
    trainer.step(QUERIES[:2] * 8)  # the batch never asks "not very": training is fine
    with pytest.raises(NonFiniteError, match=r"^iteration 1, llm1 alone \(the probe\): the task reward returned a "
                                             r"non-finite score for 4 of 8 samples; first: the answer .* to "
                                             r"'not very' scored nan"):
        trainer.probe(["a plot", "not very"], None)


def test_under_skip_a_nan_probe_score_is_left_out_of_its_mean_and_none_when_all_are():
    trainer = Trainer(with_ppo(config(n_agents=1), on_nonfinite="skip"), tiny_lm(), tiny_tokenizer(),
                      nan_for_the_probe)
    assert math.isfinite(trainer.probe(["a plot", "not very"], None)["llm1/probe_task_reward"])
    assert trainer.probe(["not very"], None) == {"llm1/probe_task_reward": None}  # an empty cell of history.csv


def test_a_nan_logged_sample_score_stops_the_run_or_is_null_in_samples_jsonl(tmp_path):
    error = Trainer(config(n_agents=1), tiny_lm(), tiny_tokenizer(), nan_for_the_probe)
    with pytest.raises(NonFiniteError, match=r"^iteration -1, llm1 alone \(a logged sample\): "):
        error.generate_alone(["not very"], None, iteration=-1)
    skip = Trainer(with_ppo(config(n_agents=2), on_nonfinite="skip"), tiny_lm(), tiny_tokenizer(),
                   nan_for_the_second_query)
    rows = skip.generate_alone(["the movie", "the film was"], None, iteration=-1)
    skip.step(QUERIES)
    rows += skip.last_samples  # the iteration's: a dropped sample's score is None too
    writer = MetricsWriter(tmp_path)
    writer.samples(rows)
    lines = [strict_json(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    scores = [(row["query"], row.get("observer_score", "-"), row["pioneer_score"]) for row in lines]
    assert ("the film was", "-", None) in scores  # before training
    assert all(pioneer is None and observer is None for query, observer, pioneer in scores[2:]
               if query == "the film was")
    assert any(pioneer is not None for _, _, pioneer in scores)


def test_all_dropped_minibatches_under_skip_write_no_nan_statistics_and_are_counted(tmp_path):
    """ppo.on_nonfinite: skip with the group baseline drops a query's whole group; with mini-batches of one sample,
    each dropped sample is a mini-batch with nothing in it (its masked means 0/0). Those are skipped and counted, and
    the update's statistics are the means over the others: no NaN in the history, no null among the final values."""
    cfg = with_ppo(config(n_agents=2), on_nonfinite="skip", samples_per_query=4, group_baseline=True,
                   mini_batch_size=1, ppo_epochs=1)
    trainer = Trainer(cfg, tiny_lm(), tiny_tokenizer(), nan_for_the_second_query)
    writer = MetricsWriter(tmp_path)
    for it in range(2):
        metrics = trainer.step(QUERIES[: cfg.ppo.queries_per_batch])
        writer.log(it, metrics)
    for agent in ("llm1", "llm2"):
        assert metrics[f"{agent}/dropped_samples"] == 4.0
        assert metrics[f"{agent}/skipped_minibatches"] >= 4.0  # the four empty ones
        for name in ("policy_loss", "value_loss", "policy_clipfrac", "value_clipfrac", "approx_kl"):
            assert math.isfinite(metrics[f"{agent}/{name}"]), name
    assert "nan" not in (tmp_path / "history.csv").read_text().lower()
    final = writer.summary(last_n=2)["final"]
    assert all(value is not None for value in final.values())
    strict_json((tmp_path / "summary.json").read_text())


def test_when_every_minibatch_is_skipped_the_statistics_are_empty_cells_not_nan(tmp_path, monkeypatch):
    from cory.rl import learner
    from cory.rl.rollout import generate

    trainer = Trainer(with_ppo(config(n_agents=1), on_nonfinite="skip"), tiny_lm(), tiny_tokenizer(),
                      good_word_reward)
    agent = trainer.agents[0]
    real = learner._minibatch_losses

    def nan_loss(*args):  # every mini-batch's loss NaN (its statistics too)
        losses, stats, ratios, _ = real(*args)
        return ([loss * float("nan") for loss in losses], [{k: v * float("nan") for k, v in s.items()} for s in stats],
                ratios, [False] * len(losses))

    monkeypatch.setattr(learner, "_minibatch_losses", nan_loss)
    rollout = generate(agent.lm, trainer.tokenizer, QUERIES, agent.cfg.generation, 4)
    exp = learner.make_experience(agent, trainer.ref_lm, rollout, good_word_reward(None, rollout.responses))
    stats = learner.ppo_update(agent, exp)
    assert stats["policy_loss"] is None and stats["skipped_minibatches"] == 8.0
    writer = MetricsWriter(tmp_path)
    writer.log(0, {"llm1/policy_loss": stats["policy_loss"], "llm1/kl": 0.5})
    writer.log(1, {"llm1/policy_loss": 0.25, "llm1/kl": 0.5})
    rows = list(csv.DictReader(open(tmp_path / "history.csv")))
    assert [row["llm1/policy_loss"] for row in rows] == ["", "0.25"]
    assert writer.final_values(2)["llm1/policy_loss"] == 0.25
