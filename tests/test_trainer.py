"""The trainer: roles, knowledge transfer, collective reward, role exchange and learning on a toy task."""

import dataclasses
import math

import pytest
import torch

from cory.rl import ppo
from cory.rl.config import CORYConfig, PPOConfig, SpeedConfig, TrainConfig
from cory.rl.learner import NonFiniteError, make_experience, ppo_update
from cory.rl.roles import Roles, collective_reward, exchange_due, observer_prompts
from cory.rl.trainer import Trainer

from tiny import QUERIES, config, fixed_rollout, good_word_reward, nan_for_the_second_query, tiny_lm, tiny_tokenizer


def test_observer_prompt_is_exactly_the_template():
    template = 'I can make this sentence "{query}{response}" more positive: {query}'
    assert observer_prompts(template, ["I loved"], [" it a lot"]) == [
        'I can make this sentence "I loved it a lot" more positive: I loved'
    ]
    with pytest.raises(ValueError):
        observer_prompts(template, ["a", "b"], ["x"])


def test_collective_reward_arithmetic():
    own, partner = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 3.0])
    assert collective_reward(own, partner, 1.0).tolist() == [1.5, 1.0]
    assert collective_reward(own, partner, -0.5).tolist() == [0.75, -3.5]


def test_two_role_exchanges_are_the_identity():
    a, b = object(), object()
    roles = Roles([a, b])
    assert (roles.pioneer, roles.observer) == (a, b)
    roles.exchange()
    assert (roles.pioneer, roles.observer) == (b, a)
    roles.exchange()
    assert (roles.pioneer, roles.observer) == (a, b)
    assert [exchange_due(k, 5) for k in range(10)] == [False] * 4 + [True] + [False] * 4 + [True]


def test_knowledge_transfer_switch_sets_the_observer_prompt():
    torch.manual_seed(0)
    trainer = Trainer(config(), tiny_lm(), tiny_tokenizer(), good_word_reward)
    trainer.step(QUERIES)
    row = trainer.last_samples[0]
    assert row["observer_prompt"] == trainer.cfg.cory.observer_template.format(
        query=row["query"], response=row["pioneer_response"]
    )
    trainer = Trainer(config(knowledge_transfer=False), tiny_lm(), tiny_tokenizer(), good_word_reward)
    trainer.step(QUERIES)
    assert trainer.last_samples[0]["observer_prompt"] == trainer.last_samples[0]["pioneer_prompt"]


def test_role_exchange_keeps_each_agents_state():
    torch.manual_seed(0)
    trainer = Trainer(config(role_exchange_period=2), tiny_lm(), tiny_tokenizer(), good_word_reward)
    llm1, llm2 = trainer.agents
    optimizers = (llm1.optimizer, llm2.optimizer)
    m = trainer.step(QUERIES)
    assert (m["llm1/role"], m["llm2/role"], m["swap"]) == (0.0, 1.0, 0.0)
    m = trainer.step(QUERIES)
    assert m["swap"] == 1.0 and trainer.roles.pioneer is llm2
    m = trainer.step(QUERIES)
    assert (m["llm1/role"], m["llm2/role"]) == (1.0, 0.0)
    assert m["llm1/task_reward"] == m["observer/task_reward"]
    assert (llm1.optimizer, llm2.optimizer) == optimizers  # the same Adam, with its moments
    assert all(s["step"] == 24 for s in llm1.optimizer.state.values())  # 3 iterations x 4 epochs x 2 steps
    assert llm1.kl_ctl.value != 0.01 and llm1.score_moments is not None


def test_reset_on_exchange_reproduces_the_official_code():
    torch.manual_seed(0)
    trainer = Trainer(config(role_exchange_period=1, reset_on_exchange=True), tiny_lm(), tiny_tokenizer(),
                      good_word_reward)
    trainer.step(QUERIES)
    for agent in trainer.agents:
        assert agent.kl_ctl.value == 0.01 and not agent.optimizer.state


def test_no_role_exchange_switch():
    trainer = Trainer(config(role_exchange=False, role_exchange_period=1), tiny_lm(), tiny_tokenizer(),
                      good_word_reward)
    for _ in range(2):
        assert trainer.step(QUERIES)["swap"] == 0.0
    assert trainer.roles.pioneer is trainer.agents[0]


def test_single_agent_is_ppo_through_the_same_trainer():
    trainer = Trainer(config(n_agents=1), tiny_lm(), tiny_tokenizer(), good_word_reward)
    m = trainer.step(QUERIES)
    assert len(trainer.agents) == 1 and "llm2/kl" not in m and "observer/kl" not in m
    assert m["llm1/kl"] == pytest.approx(0.0, abs=1e-6)  # first rollout: policy == reference


def test_all_minibatches_skipped_leaves_the_policy_unchanged():
    torch.manual_seed(0)
    trainer = Trainer(config(n_agents=1), tiny_lm(), tiny_tokenizer(), good_word_reward)
    agent = trainer.agents[0]
    agent.cfg = PPOConfig(**{**agent.cfg.__dict__, "ratio_threshold": 1e-3})
    before = [p.detach().clone() for p in agent.lm.parameters()]
    from cory.rl.rollout import generate

    rollout = generate(agent.lm, trainer.tokenizer, QUERIES, agent.cfg.generation, 4)
    stats = ppo_update(agent, make_experience(agent, trainer.ref_lm, rollout, good_word_reward(None, rollout.responses)))
    assert stats["skipped_minibatches"] == 8.0
    assert all(torch.equal(a, b) for a, b in zip(before, agent.lm.parameters()))


@pytest.mark.parametrize("on_nonfinite", ["skip", "error"])
def test_a_non_finite_loss_is_skipped_not_stepped_on(monkeypatch, on_nonfinite):
    """An inf loss must not reach the optimizer: TRL's `loss * 0.0` would make its gradients NaN. With
    ppo.on_nonfinite: error the run stops instead, naming the loss."""
    from cory.rl import learner
    from cory.rl.rollout import generate

    torch.manual_seed(0)
    trainer = Trainer(config(n_agents=1), tiny_lm(), tiny_tokenizer(), good_word_reward)
    agent = trainer.agents[0]
    agent.cfg = PPOConfig(**{**agent.cfg.__dict__, "on_nonfinite": on_nonfinite})
    real = learner._minibatch_losses

    def inf_loss(*args):
        losses, stats, ratios, _ = real(*args)
        losses = [loss * float("inf") for loss in losses]
        return losses, stats, ratios, [bool(torch.isfinite(loss)) for loss in losses]

    monkeypatch.setattr(learner, "_minibatch_losses", inf_loss)
    before = [p.detach().clone() for p in agent.lm.parameters()]
    rollout = generate(agent.lm, trainer.tokenizer, QUERIES, agent.cfg.generation, 4)
    exp = make_experience(agent, trainer.ref_lm, rollout, good_word_reward(None, rollout.responses))
    if on_nonfinite == "error":
        with pytest.raises(NonFiniteError, match="non-finite PPO loss .* epoch 0"):
            ppo_update(agent, exp)
        return
    stats = ppo_update(agent, exp)
    assert stats["skipped_minibatches"] == 8.0
    assert all(torch.equal(a, b) for a, b in zip(before, agent.lm.parameters()))


def test_a_non_finite_gradient_is_dropped_not_stepped_on():
    """A NaN gradient with a finite loss (the cuDNN attention backward bug of cory.rl.kernels.configure_gpu_for_rl)
    must leave the weights as they were."""
    from cory.rl.rollout import generate

    torch.manual_seed(0)
    trainer = Trainer(config(n_agents=1), tiny_lm(), tiny_tokenizer(), good_word_reward)
    agent = trainer.agents[0]
    agent.cfg = PPOConfig(**{**agent.cfg.__dict__, "on_nonfinite": "skip"})
    rollout = generate(agent.lm, trainer.tokenizer, QUERIES, agent.cfg.generation, 4)
    exp = make_experience(agent, trainer.ref_lm, rollout, good_word_reward(None, rollout.responses))
    weight = next(agent.lm.parameters())
    hook = weight.register_hook(lambda grad: grad * float("nan"))
    before = [p.detach().clone() for p in agent.lm.parameters()]
    stats = ppo_update(agent, exp)
    hook.remove()
    assert stats["skipped_steps"] == 8.0 and stats["skipped_minibatches"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, agent.lm.parameters()))
    assert all(torch.isfinite(p).all() for p in agent.lm.parameters())


@pytest.mark.parametrize("mode", ["none", "trl", "update"])
def test_only_dropout_update_makes_the_update_forward_differ_from_the_experience_one(mode):
    """The first mini-batch of the first epoch starts at ratio 1 exactly (approx_kl 0) unless ppo.dropout is "update"
    (trl computes both with the same eval-mode batched_forward_pass)."""
    from cory.rl.agents import Agent

    torch.manual_seed(0)
    cfg = PPOConfig(batch_size=4, mini_batch_size=4, ppo_epochs=1, dropout=mode)
    agent = Agent("llm1", tiny_lm(dropout=0.5), cfg)
    rollout = fixed_rollout()
    exp = make_experience(agent, tiny_lm(), rollout, torch.tensor([1.0, 0.0, -1.0, 0.5]))
    stats = ppo_update(agent, exp)
    assert (stats["approx_kl"] == 0.0) == (mode != "update"), stats["approx_kl"]


@pytest.mark.parametrize("n_agents", [1, 2])
def test_training_raises_the_task_reward(n_agents):
    torch.manual_seed(0)
    trainer = Trainer(config(n_agents=n_agents), tiny_lm(), tiny_tokenizer(), good_word_reward)
    rewards = [trainer.step(QUERIES)["llm1/task_reward"] for _ in range(30)]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.3, (first, last)


def test_lora_trains_adapters_only_and_saves_a_plain_model(tmp_path):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = config(n_agents=2)
    cfg.lora_rank = 4
    base = tiny_lm()
    frozen = {k: v.clone() for k, v in base.state_dict().items()}
    trainer = Trainer(cfg, base, tiny_tokenizer(), good_word_reward)
    trainer.step(QUERIES)
    trainable = [n for n, p in trainer.agents[0].lm.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    trainer.agents[0].save(tmp_path / "llm1")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "llm1")
    assert set(loaded.state_dict()) == set(frozen)  # a plain GPT-2, no adapter keys
    assert any(not torch.equal(loaded.state_dict()[k], frozen[k]) for k in frozen)  # the adapters were merged in


def test_generate_alone_continues_fixed_queries_with_llm1_and_scores_them():
    torch.manual_seed(0)
    trainer = Trainer(config(), tiny_lm(), tiny_tokenizer(), good_word_reward)
    rows = trainer.generate_alone(["the movie", "a plot"], None, iteration=-1)
    assert [r["query"] for r in rows] == ["the movie", "a plot"]
    assert all(r["iteration"] == -1 and r["pioneer_agent"] == "llm1" for r in rows)
    assert [r["pioneer_score"] for r in rows] == good_word_reward(None, [r["pioneer_response"] for r in rows]).tolist()


def test_samples_per_query_answers_each_query_k_times_side_by_side():
    torch.manual_seed(0)
    cfg = config(n_agents=2)
    cfg.ppo = PPOConfig(**{**cfg.ppo.__dict__, "samples_per_query": 4, "group_baseline": True})
    seen = []

    def reward(queries, responses, answers=None):
        seen.append(list(queries))
        return good_word_reward(queries, responses)

    trainer = Trainer(cfg, tiny_lm(), tiny_tokenizer(), reward)
    m = trainer.step(QUERIES[: cfg.ppo.queries_per_batch])
    expanded = [q for q in QUERIES[:4] for _ in range(4)]
    assert seen == [expanded * 2]  # one call of the reward scores both roles, each on the 16 repeated queries
    assert [row["query"] for row in trainer.last_samples] == QUERIES[:4]  # one logged attempt per query
    for row in trainer.last_samples:  # each role got the scores of its own responses back
        for role in ("pioneer", "observer"):
            assert row[f"{role}_score"] == good_word_reward(None, [row[f"{role}_response"]]).item()
    assert all(math.isfinite(v) for v in m.values())


def test_group_baseline_centres_each_querys_training_scores():
    from cory.rl.rollout import generate

    torch.manual_seed(0)
    cfg = config(n_agents=1)
    cfg.ppo = PPOConfig(**{**cfg.ppo.__dict__, "samples_per_query": 4, "group_baseline": True,
                           "use_score_scaling": False})
    trainer = Trainer(cfg, tiny_lm(), tiny_tokenizer(), good_word_reward)
    agent = trainer.agents[0]
    rollout = generate(agent.lm, trainer.tokenizer, [q for q in QUERIES[:4] for _ in range(4)], agent.cfg.generation, 4)
    raw = good_word_reward(None, rollout.responses)
    exp = make_experience(agent, trainer.ref_lm, rollout, raw)
    assert exp.scores.view(4, 4).sum(1).tolist() == pytest.approx([0.0] * 4, abs=1e-6)
    assert exp.scores.tolist() == pytest.approx(ppo.leave_one_out_baseline(raw, 4).tolist())


def test_zero_init_value_head_starts_at_v_zero_and_leaves_advantages_to_the_scores():
    from cory.rl.rollout import generate

    torch.manual_seed(0)
    cfg = config(n_agents=1)
    cfg.ppo = PPOConfig(**{**cfg.ppo.__dict__, "zero_init_value_head": True, "lam": 1.0, "init_kl_coef": 0.0,
                           "use_score_scaling": False})
    trainer = Trainer(cfg, tiny_lm(), tiny_tokenizer(), good_word_reward)
    agent = trainer.agents[0]
    rollout = generate(agent.lm, trainer.tokenizer, QUERIES, agent.cfg.generation, 4)
    exp = make_experience(agent, trainer.ref_lm, rollout, good_word_reward(None, rollout.responses))
    assert torch.count_nonzero(exp.values) == 0
    # gamma = lam = 1, no KL, V = 0: every token's return is its response's score
    assert torch.allclose(exp.returns, exp.scores[:, None] * exp.mask)


def test_a_nan_score_stops_the_run_naming_the_iteration_and_the_sample():
    torch.manual_seed(0)
    trainer = Trainer(config(n_agents=2), tiny_lm(), tiny_tokenizer(), nan_for_the_second_query)
    with pytest.raises(NonFiniteError, match=r"iteration 0: .* non-finite score for 4 of 16 samples; first: the "
                                             r"pioneer's answer .* to 'the film was' scored nan"):
        trainer.step(QUERIES)


@pytest.mark.parametrize("samples_per_query", [1, 4])
def test_on_nonfinite_skip_drops_the_nan_samples_and_keeps_learning(samples_per_query):
    torch.manual_seed(0)
    cfg = config(n_agents=2)
    cfg.ppo = PPOConfig(**{**cfg.ppo.__dict__, "on_nonfinite": "skip", "samples_per_query": samples_per_query,
                           "group_baseline": samples_per_query > 1, "use_score_scaling": True})
    trainer = Trainer(cfg, tiny_lm(), tiny_tokenizer(), nan_for_the_second_query)
    before = [p.detach().clone() for p in trainer.agents[0].lm.parameters()]
    for _ in range(2):
        m = trainer.step(QUERIES[: cfg.ppo.queries_per_batch])
    assert m["llm1/dropped_samples"] == 4.0 and m["llm2/dropped_samples"] == 4.0
    assert all(math.isfinite(v) for v in m.values())
    assert all(math.isfinite(a.score_moments.mean) and math.isfinite(a.score_moments.std) for a in trainer.agents)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.agents[0].lm.parameters()))


def test_compiled_forward_passes_give_the_eager_experience_and_update():
    """ppo.speed.compile (true: the whole forward pass; "regional": each transformer block): the experience and the update
    run through torch.compile'd callables of the policy and the reference that share their weights: the same
    log-probs, values and updated weights as eager, up to rounding."""
    from cory.rl.agents import build_agents

    results = []
    for compile in (False, True, "regional"):
        torch.manual_seed(0)
        cfg = TrainConfig(seed=0, ppo=PPOConfig(batch_size=4, mini_batch_size=2, dropout="none", speed=SpeedConfig(compile=compile)),
                          cory=CORYConfig(n_agents=1))
        (agent,), reference = build_agents(cfg, tiny_lm())
        assert (agent.forward_lm is agent.lm) != bool(compile)
        exp = make_experience(agent, reference, fixed_rollout(), torch.tensor([1.0, 0.0, -1.0, 0.5]))
        ppo_update(agent, exp, torch.Generator().manual_seed(0))
        after = make_experience(agent, reference, fixed_rollout(), torch.tensor([1.0, 0.0, -1.0, 0.5]))
        # regional: the blocks ran compiled inside the forward passes only; sampling finds them eager
        assert all(block._compiled_call_impl is None for block in agent.lm.base_model.h)
        results.append((exp.logprobs, exp.values, after.logprobs, after.values, *agent.lm.parameters()))
    assert not torch.equal(results[0][0], results[0][2])  # the update moved the policy
    for eager, *compiled in zip(*results):
        for each in compiled:
            torch.testing.assert_close(each, eager, rtol=1e-5, atol=1e-6)


def test_an_aligned_lm_head_trains_as_the_plain_one():
    """ppo.speed.align_head changes how the output matmul runs, not what it computes: the same samples and metrics."""
    from dataclasses import replace

    histories = []
    for align in (False, True):
        torch.manual_seed(0)
        cfg = config(n_agents=2, dropout="none")
        trainer = Trainer(replace(cfg, ppo=replace(cfg.ppo, speed=replace(cfg.ppo.speed, align_head=align))), tiny_lm(), tiny_tokenizer(),
                          good_word_reward)
        assert all(type(a.lm.lm_head).__name__ == ("AlignedLMHead" if align else "Linear") for a in trainer.agents)
        histories.append([trainer.step(QUERIES) for _ in range(3)])
    for plain, aligned in zip(*histories):
        assert plain.keys() == aligned.keys()
        for key in plain:
            if not key.startswith("timing/"):
                assert aligned[key] == pytest.approx(plain[key], rel=1e-5, abs=1e-6), key


def test_with_a_per_shape_cache_the_logged_samples_and_the_probe_reuse_the_training_batch_shape():
    """`ppo.generation.cache: graph`: LLM1's logged samples (3 prompts) and its probe (5 x 4 = 20 prompts) are sampled
    at the training batch's 16 rows, so the models hold decoders of that one batch size (a decoder per batch size is a
    compilation on a GPU: 8-11 s each in a math run)."""
    cfg = config(n_agents=2)
    cfg = dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, generation=dataclasses.replace(
        cfg.ppo.generation, cache="graph")))
    torch.manual_seed(0)
    trainer = Trainer(cfg, tiny_lm(), tiny_tokenizer(), good_word_reward)
    rows = trainer.generate_alone(QUERIES[:3], None, iteration=-1)
    trainer.step(QUERIES)
    trainer.probe(QUERIES[:5], None)
    assert len(rows) == 3
    sizes = {key[0] for agent in trainer.agents for key in getattr(agent.lm, "_cory_graph_decoders", {})}
    assert sizes == {cfg.ppo.batch_size}
