"""RLOO and GRPO (train.algorithm): their advantages, losses and k3 KL against numbers worked by hand; the step
through the trainer (no value head, CORY over each); their settings checked before any work; and the critic-free
SmolLM2 IMDB groups, which validate and expand into jobs."""

import copy
import math

import pytest
import torch

from cory.rl import critic_free, ppo
from cory.rl.config import IMDB_OBSERVER_TEMPLATE, CORYConfig, GenerationConfig, GRPOConfig, PPOConfig, TrainConfig
from cory.rl.learner import make_experience, ppo_update
from cory.rl.rollout import generate
from cory.rl.trainer import Trainer
from cory.schema import ConfigError, from_dict
from pipeline.params import validate
from pipeline.profile import render

from tiny import good_word_reward, tiny_lm, tiny_tokenizer

QUERIES = ["the movie", "the film was", "a plot", "not very"]
LN2 = math.log(2.0)


# --------------------------------------------------------------------------------------------------------------------
# Advantages and KL, by hand
# --------------------------------------------------------------------------------------------------------------------


def test_rloo_advantage_is_each_return_less_the_mean_of_the_others():
    # returns 1, 2, 6: the others' means are 4, 3.5, 1.5
    advantages = critic_free.rloo_advantages(torch.tensor([1.0, 2.0, 6.0, 0.0, 0.0, 3.0]), 3)
    assert advantages.tolist() == pytest.approx([-3.0, -1.5, 4.5, -1.5, -1.5, 3.0])
    assert advantages.view(2, 3).sum(1).tolist() == pytest.approx([0.0, 0.0])


def test_grpo_advantage_is_the_score_less_its_groups_mean_over_its_std():
    # [0, 1, 2]: mean 1, std 1 (Bessel); [1, 1, 4]: mean 2, std sqrt(3); [5, 5, 5]: std 0, advantage 0
    advantages = critic_free.group_advantages(torch.tensor([0.0, 1.0, 2.0, 1.0, 1.0, 4.0, 5.0, 5.0, 5.0]), 3)
    eps = critic_free.GROUP_STD_EPS
    expected = [-1 / (1 + eps), 0.0, 1 / (1 + eps)] + [x / (math.sqrt(3) + eps) for x in (-1, -1, 2)] + [0.0] * 3
    assert advantages.tolist() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="groups of >= 2 that divide the batch"):
        critic_free.group_advantages(torch.zeros(4), 3)


def test_rloo_return_is_ppos_shaped_reward_summed_over_the_response():
    scores = torch.tensor([1.0, -0.5])
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, -0.2, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    returns = critic_free.sequence_returns(scores, kl, mask, 0.5)
    assert returns.tolist() == pytest.approx([1.0 - 0.5 * 0.6, -0.5 - 0.5 * 0.2])  # the padding's 9.0: nothing
    rewards, _ = ppo.shape_rewards(scores, kl * mask, mask, 0.5)
    assert rewards.sum(1).tolist() == pytest.approx(returns.tolist())


def test_k3_by_hand_never_negative_and_zero_on_padding():
    # r = pi_ref / pi: 0.5, 1, 2 -> r - log r - 1 = log 2 - 0.5, 0, 1 - log 2
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.1, 0.4]]))
    ref = torch.log(torch.tensor([[0.25, 0.3, 0.2, 1e-30]]))
    k3 = critic_free.k3_kl(logp, ref, torch.tensor([[1, 1, 1, 0]]))
    assert k3.tolist()[0] == pytest.approx([LN2 - 0.5, 0.0, 1 - LN2, 0.0], abs=1e-7)


def test_k3_averaged_under_the_policy_is_the_exact_kl():
    torch.manual_seed(0)
    logits, ref_logits = torch.randn(2, 3, 7), torch.randn(2, 3, 7)
    logp, ref = logits.log_softmax(-1), ref_logits.log_softmax(-1)
    every_token = torch.ones(2, 3 * 7)
    k3 = critic_free.k3_kl(logp.reshape(2, -1), ref.reshape(2, -1), every_token).view(2, 3, 7)
    assert torch.allclose((logp.exp() * k3).sum(-1), ppo.full_kl(logits, ref_logits), atol=1e-6)


# --------------------------------------------------------------------------------------------------------------------
# Losses, by hand: one answer of three tokens, ratios 1, 1.5, 0.5, advantage 1, clip range 0.2
# --------------------------------------------------------------------------------------------------------------------

P = torch.tensor([[0.5, 0.3, 0.1]])  # pi_theta of the three sampled tokens
OLD = torch.tensor([[0.5, 0.2, 0.2]])  # pi_old: ratios 1, 1.5, 0.5
REF = torch.tensor([[0.25, 0.3, 0.2]])  # pi_ref: r = 0.5, 1, 2; k3 = log 2 - 0.5, 0, 1 - log 2
MASK = torch.ones(1, 3)


def grpo(kl_coef=0.0, weight=True, logp=None):
    return critic_free.grpo_loss(torch.log(P) if logp is None else logp, torch.log(OLD), torch.log(REF),
                                 torch.tensor([1.0]), MASK, 0.2, kl_coef, weight)


def test_grpo_clipped_loss_three_tokens_by_hand():
    # per token max(-A rho, -A clip(rho)): max(-1, -1) = -1, max(-1.5, -1.2) = -1.2, max(-0.5, -0.8) = -0.5
    loss, stats = grpo()
    assert loss.item() == pytest.approx(-2.7 / 3)
    assert stats["clipfrac"].item() == pytest.approx(1 / 3) and stats["ratio"].item() == pytest.approx(1.0)
    assert "kl" not in stats  # kl_coef 0 (trl's default): no KL term, the reference not read


def test_grpo_kl_term_three_tokens_by_hand():
    # beta x mean k3 = 0.1 x (log 2 - 0.5 + 0 + 1 - log 2) / 3 = 0.1 x 0.5 / 3; weighted by rho (1, 1.5, 0.5):
    # (log 2 - 0.5) x 1 + 0 + (1 - log 2) x 0.5 = log(2) / 2, so 0.1 x log(2) / 6
    unweighted, stats = grpo(0.1, weight=False)
    assert unweighted.item() == pytest.approx(-0.9 + 0.1 * 0.5 / 3)
    assert stats["kl"].item() == pytest.approx(0.5 / 3) and stats["policy_loss"].item() == pytest.approx(-0.9)
    weighted, _ = grpo(0.1, weight=True)
    assert weighted.item() == pytest.approx(-0.9 + 0.1 * LN2 / 6)


def test_grpo_kl_gradient_on_policy_is_k1_with_the_ratio_weight():
    """At rho = 1, d(k3 rho)/d log pi = 1 - r + k3 = log pi - log pi_ref (the reverse KL's own gradient, trl's
    use_bias_correction_kl); k3 alone gives 1 - r. r = pi_ref / pi = 0.5, 1, 2; the loss is a mean over 3 tokens."""
    for weight, expected in ((True, [LN2, 0.0, -LN2]), (False, [0.5, 0.0, -1.0])):
        logp = torch.log(P).requires_grad_()
        loss = critic_free.grpo_loss(logp, torch.log(P), torch.log(REF), torch.tensor([0.0]), MASK, 0.2, 1.0,
                                     weight)[0]
        loss.backward()
        assert (3 * logp.grad).tolist()[0] == pytest.approx(expected, abs=1e-6)


def test_rloo_loss_clips_the_whole_answers_ratio_by_hand():
    # answer 0: log-ratios 0.1, 0.1, 0.05 -> rho = e^0.25 = 1.2840, A = 2: max(-2.568, -2 x 1.2) = -2.4 (clipped)
    # answer 1: 0.3, 0.2 and a padding token -> rho = e^0.5 = 1.6487, A = -1: max(1.6487, 1.2) = 1.6487
    # answer 2: left out of the update (all-zero mask) counts for nothing
    old = torch.zeros(3, 3)
    logp = torch.tensor([[0.1, 0.1, 0.05], [0.3, 0.2, 5.0], [0.7, 0.7, 0.7]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])
    loss, stats = critic_free.rloo_loss(logp, old, torch.tensor([2.0, -1.0, 3.0]), mask, 0.2)
    assert loss.item() == pytest.approx((-2.4 + math.exp(0.5)) / 2)
    assert stats["clipfrac"].item() == pytest.approx(0.5)
    assert stats["ratio"].item() == pytest.approx((math.exp(0.25) + math.exp(0.5)) / 2)
    assert stats["approx_kl"].item() == pytest.approx(0.5 * (0.01 + 0.01 + 0.0025 + 0.09 + 0.04) / 5)


def test_rloo_loss_on_policy_is_reinforce_with_the_baseline():
    """At rho = 1 the gradient of the loss is -A grad sum_t log pi(a_t) / B: REINFORCE with the leave-one-out
    baseline, whatever the clip range."""
    logp = torch.log(torch.tensor([[0.5, 0.3], [0.2, 0.9]])).requires_grad_()
    critic_free.rloo_loss(logp, logp.detach(), torch.tensor([1.5, -0.5]), torch.ones(2, 2), 0.2)[0].backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-0.75, -0.75, 0.25, 0.25])


# --------------------------------------------------------------------------------------------------------------------
# Through the learner and the trainer
# --------------------------------------------------------------------------------------------------------------------


def config(algorithm: str, n_agents: int = 2, kl_coef: float = 0.0, **cory) -> TrainConfig:
    ppo_cfg = PPOConfig(learning_rate=3e-3, batch_size=16, mini_batch_size=8, samples_per_query=4, init_kl_coef=0.05,
                        generation=GenerationConfig(response_length=(4, 6), repetition_penalty=1.0))
    return TrainConfig(iterations=3, seed=0, algorithm=algorithm, ppo=ppo_cfg, grpo=GRPOConfig(kl_coef=kl_coef),
                       cory=CORYConfig(n_agents=n_agents, **{"observer_template": IMDB_OBSERVER_TEMPLATE, **cory}))


@pytest.mark.parametrize("algorithm", ["rloo", "grpo"])
def test_the_experiences_advantages_are_the_algorithms(algorithm):
    torch.manual_seed(0)
    trainer = Trainer(config(algorithm, n_agents=1, kl_coef=0.1), tiny_lm(), tiny_tokenizer(), good_word_reward)
    agent = trainer.agents[0]
    assert agent.value_head is None
    assert len(agent.parameters()) == len(list(agent.lm.parameters()))  # the LM's weights and nothing else
    prompts = [q for q in QUERIES for _ in range(4)]
    rollout = generate(agent.lm, trainer.tokenizer, prompts, agent.cfg.generation, 5)
    scores = good_word_reward(None, rollout.responses) + torch.arange(16) / 100  # no group of equal scores
    exp = make_experience(agent, trainer.ref_lm, rollout, scores)
    mask = rollout.response_mask.float()
    if algorithm == "rloo":
        beta = agent.kl_ctl.value
        assert beta == 0.05  # ppo.init_kl_coef: the reward's KL penalty, as PPO's
        returns = exp.scores - beta * (exp.kl_penalty * mask).sum(1)
        others = (returns.view(4, 4).sum(1, keepdim=True) - returns.view(4, 4)) / 3
        expected = (returns.view(4, 4) - others).view(-1)
    else:
        assert agent.kl_ctl.value == 0.1  # train.grpo.kl_coef, not ppo.init_kl_coef
        groups = exp.scores.view(4, 4)
        expected = ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-4)).view(-1)
        k3 = torch.exp(exp.ref_logprobs - exp.logprobs) - (exp.ref_logprobs - exp.logprobs) - 1
        assert torch.allclose(exp.kl_penalty, k3 * mask)
    assert torch.allclose(exp.advantages, expected[:, None] * mask, atol=1e-6)
    assert exp.values is None and exp.returns is None
    stats = ppo_update(agent, exp, torch.Generator().manual_seed(0))
    assert set(stats) == {"policy_loss", "policy_clipfrac", "approx_kl", "skipped_minibatches", "skipped_steps",
                          "kl_coef"}
    assert all(math.isfinite(v) for v in stats.values())


@pytest.mark.parametrize("algorithm", ["rloo", "grpo"])
def test_cory_over_a_critic_free_algorithm(algorithm):
    """The observer answers every pioneer answer (k of them per query), the collective reward and the role exchange
    are CORY's, and neither agent has a value head."""
    torch.manual_seed(0)
    trainer = Trainer(config(algorithm, kl_coef=0.05, role_exchange_period=2), tiny_lm(), tiny_tokenizer(),
                      good_word_reward)
    llm1, llm2 = trainer.agents
    metrics = [trainer.step(QUERIES) for _ in range(3)]
    assert llm1.value_head is None and llm2.value_head is None
    assert [m["swap"] for m in metrics] == [0.0, 1.0, 0.0] and trainer.roles.pioneer is llm2
    assert (metrics[2]["llm1/role"], metrics[2]["llm2/role"]) == (1.0, 0.0)
    for m in metrics:
        assert not any(key.endswith(("value_loss", "value_clipfrac")) for key in m)
        assert all(math.isfinite(v) for v in m.values())
        assert m["pioneer/training_score"] == pytest.approx(m["pioneer/task_reward"] + m["observer/task_reward"])
    samples = trainer.last_samples[0]
    assert samples["observer_prompt"] == trainer.cfg.cory.observer_template.format(
        query=samples["query"], response=samples["pioneer_response"])
    assert metrics[0]["llm1/kl_coef"] == (0.05 if algorithm == "grpo" else pytest.approx(0.05, rel=1e-3))
    assert all(s["step"] == 3 * 4 * 2 for s in llm1.optimizer.state.values())  # 3 iterations x 4 epochs x 2 steps


def test_rloo_learns_the_toy_task():
    """Single-agent RLOO raises the share of 'good' in its answers (the toy task the PPO tests learn)."""
    torch.manual_seed(0)
    cfg = config("rloo", n_agents=1)
    cfg.ppo = PPOConfig(**{**cfg.ppo.__dict__, "init_kl_coef": 0.0, "learning_rate": 1e-2})
    trainer = Trainer(cfg, tiny_lm(), tiny_tokenizer(), good_word_reward)
    rewards = [trainer.step(QUERIES)["llm1/task_reward"] for _ in range(12)]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.1


# --------------------------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default():
    return render("default")


@pytest.mark.parametrize("edit, message", [
    (lambda p: p["train"].update(algorithm="ppo2"), r"^train\.algorithm: must be one of \['ppo', 'rloo', 'grpo'\]"),
    (lambda p: p["train"].update(algorithm="rloo"),
     r"^train\.ppo\.samples_per_query: rloo needs at least 2 answers per query .* got 1"),
    (lambda p: p["experiments"]["imdb"]["runs"]["cory"].update(train={"algorithm": "grpo"}),
     r"^experiments\.imdb\.runs\.cory\.train\.ppo\.samples_per_query: grpo needs at least 2 answers per query"),
    (lambda p: p["train"].update(algorithm="grpo", ppo={**p["train"]["ppo"], "samples_per_query": 3}),
     r"^train\.ppo\.samples_per_query: must divide batch_size = 256, got 3"),
    (lambda p: p["train"].update(algorithm="grpo", ppo={**p["train"]["ppo"], "samples_per_query": 4,
                                                        "group_baseline": True}),
     r"^train\.ppo\.group_baseline: PPO's option; grpo has its own group baseline"),
    (lambda p: p["train"].update(grpo={"kl_coef": -0.1}), r"^train\.grpo\.kl_coef: must be >= 0"),
    (lambda p: p["train"].update(grpo={"beta": 0.1}), r"^train\.grpo\.beta: unknown setting"),
    (lambda p: p["tasks"]["imdb"].update(held_out=-1), r"^tasks\.imdb\.held_out: must be >= 0"),
    (lambda p: p["experiments"]["imdb"]["runs"]["cory"].update(train={"grpo": {"kl_coef": 0.1}}),
     r"^experiments\.imdb\.runs\.cory\.train\.grpo: ignored: train\.algorithm is ppo here"),
    (lambda p: p["experiments"]["imdb"].update(train={"algorithm": "rloo", "grpo": {"kl_coef": 0.1},
                                                      "ppo": {"samples_per_query": 4}}),
     r"^experiments\.imdb\.train\.grpo: ignored: train\.algorithm is rloo here"),
])
def test_bad_algorithm_settings_are_one_line_before_any_work(default, edit, message):
    params = copy.deepcopy(default)
    edit(params)
    with pytest.raises(ConfigError, match=message):
        validate(params)


def test_a_config_built_in_code_is_checked_as_well():
    with pytest.raises(ConfigError, match=r"^train\.algorithm: unknown algorithm 'a2c'; choose one of ppo, rloo, grpo"):
        TrainConfig(algorithm="a2c")
    with pytest.raises(ConfigError, match=r"^train\.ppo\.samples_per_query: grpo needs at least 2"):
        TrainConfig(algorithm="grpo")
    assert from_dict(TrainConfig, {}).algorithm == "ppo" and TrainConfig().grpo.kl_coef == 0.0


CRITIC_FREE_GROUPS = {
    # the mechanism experiment's single agent and CORY (seeds, eta, adaptive KL, model, learning rate) over RLOO
    "imdb_smollm2_rloo": {
        "task": "imdb", "seeds": [0, 1, 2, 3, 4, 5], "save_models": False,
        "train": {"combined_reward_eta": 0.3, "algorithm": "rloo",
                  "ppo": {"learning_rate": 1.0e-4, "samples_per_query": 4}},
        "runs": {"ppo": {"model": "smollm2", "train": {"cory": {"n_agents": 1}, "ppo": {"init_kl_coef": 0.03}}},
                 "cory": {"model": "smollm2", "train": {"ppo": {"init_kl_coef": 0.03}}},
                 "cory_no_rex": {"model": "smollm2", "train": {"ppo": {"init_kl_coef": 0.03},
                                                                "cory": {"role_exchange": False}}}}},
    # ... and over GRPO at trl's default (no KL term: grpo.kl_coef 0)
    "imdb_smollm2_grpo": {
        "task": "imdb", "seeds": [0, 1, 2, 3, 4, 5], "save_models": False,
        "train": {"combined_reward_eta": 0.3, "algorithm": "grpo", "grpo": {"kl_coef": 0.0},
                  "ppo": {"learning_rate": 1.0e-4, "samples_per_query": 4}},
        "runs": {"ppo": {"model": "smollm2", "train": {"cory": {"n_agents": 1}}},
                 "cory": {"model": "smollm2"}}},
}


def test_the_critic_free_smollm2_groups_validate_and_expand_into_jobs(default):
    params = copy.deepcopy(default)
    params["seeds"] = sorted(set(params["seeds"]) | {0, 1, 2, 3, 4, 5})
    params["experiments"].update(copy.deepcopy(CRITIC_FREE_GROUPS))
    params["report"]["imdb_groups"] = [*params["report"]["imdb_groups"], *CRITIC_FREE_GROUPS]
    tree = validate(params)
    held_out = params["tasks"]["imdb"]["held_out"]  # the role-swap test's prompts, never trained on
    assert held_out > 0
    for group, algorithm in (("imdb_smollm2_rloo", "rloo"), ("imdb_smollm2_grpo", "grpo")):
        jobs = tree.jobs[group]
        runs = {"imdb_smollm2_rloo": ("ppo", "cory", "cory_no_rex"), "imdb_smollm2_grpo": ("ppo", "cory")}[group]
        assert sorted(job.name for job in jobs) == sorted(f"{group}/{r}/seed{s}" for r in runs for s in range(6))
        for job in jobs:
            cfg = job.train
            assert (cfg.algorithm, cfg.ppo.samples_per_query, cfg.ppo.queries_per_batch) == (algorithm, 4, 64)
            assert cfg.cory.n_agents == (1 if job.run == "ppo" else 2) and job.model == "smollm2"
            assert job.task.held_out == held_out and cfg.ppo.learning_rate == 1.0e-4 and cfg.ppo.adaptive_kl
            assert cfg.ppo.init_kl_coef == 0.03 and cfg.cory.role_exchange == (job.run != "cory_no_rex")
        assert {job.algorithm for job in jobs} == {"ppo", "cory"}  # single agent vs CORY, as the report reads them


def test_a_killed_critic_free_cory_run_resumes_to_the_uninterrupted_history(tmp_path, monkeypatch):
    """A checkpoint without value heads: weights, Adam, score moments, RNGs and the batch sequence come back."""
    import json

    from cory.runs.config import Job, TaskConfig
    from cory.runs.run import run_training
    from run_fixtures import history, killed_on_step

    torch.set_num_threads(1)
    tiny_lm(n_embd=32).save_pretrained(tmp_path / "model")
    tiny_tokenizer().save_pretrained(tmp_path / "model")
    rows = [{"question": q, "answer": "#### 1"} for q in QUERIES * 4]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = TaskConfig(model=str(tmp_path / "model"), prompts=str(tmp_path / "prompts.jsonl"), reward="math")
    cfg = config("grpo", kl_coef=0.05, role_exchange_period=2)
    cfg.ppo = PPOConfig(**{**cfg.ppo.__dict__, "batch_size": 8, "mini_batch_size": 4, "samples_per_query": 2,
                           "use_score_scaling": True})
    cfg.iterations, cfg.samples_to_log = 5, 2

    def job(where):
        return Job("g", "r", 0, cfg, task, task.model, str(tmp_path / where / "run"), True,
                   str(tmp_path / where / "ckpt"), fingerprint="f")

    run_training(job("whole"), "cpu", checkpoint_every=2)
    with killed_on_step(monkeypatch, 5):  # iterations 0-3 done, the checkpoint after iteration 3 in force
        run_training(job("killed"), "cpu", checkpoint_every=2)
    assert not list((tmp_path / "killed/ckpt/resume").glob("*/*value_head*"))
    assert run_training(job("killed"), "cpu", checkpoint_every=2)["resumed_after"] == 3
    assert history(tmp_path / "killed/run") == history(tmp_path / "whole/run")
    for agent in ("llm1", "llm2"):
        assert not (tmp_path / f"whole/ckpt/{agent}/value_head.safetensors").exists()
        assert ((tmp_path / f"killed/ckpt/{agent}/model.safetensors").read_bytes()
                == (tmp_path / f"whole/ckpt/{agent}/model.safetensors").read_bytes())
