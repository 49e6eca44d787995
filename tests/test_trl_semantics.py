"""What trl 0.7-0.11's `PPOTrainer` really does, where it is easy to get wrong: the settings that reproduce it.

- ppo.dropout "trl": `batched_forward_pass` calls `model.eval()` and is also the update's forward, so a PPO step is the
  same at any dropout rate; `train_minibatch` then calls `model.train()`, so from the second iteration on the policy
  samples with dropout.
- ppo.ratio_threshold_mode "trl": a runaway mini-batch's loss is multiplied by 0, but `optimizer.step()` still runs.
"""

import dataclasses

import pytest
import torch
import yaml
from torch import nn

from cory.rl.agents import Agent
from cory.rl.config import PPOConfig
from cory.schema import ConfigError, from_dict
from cory.rl.learner import make_experience, ppo_update
from cory.rl.rollout import Rollout, generate
from cory.rl.trainer import Trainer

from tiny import QUERIES, config, fixed_rollout, good_word_reward, tiny_lm, tiny_tokenizer

SCORES = torch.tensor([1.0, 0.0, -1.0, 0.5, 0.25, -0.5, 2.0, 0.0])


def dropout_active_during_generate(lm) -> list[bool]:
    """Patch `lm.generate` to record, per call, whether its dropout modules (p > 0) were in train mode."""
    calls, inner = [], lm.generate
    drops = [m for m in lm.modules() if isinstance(m, nn.Dropout) and m.p > 0]
    assert drops

    def spy(*args, **kwargs):
        calls.append(all(m.training for m in drops))
        return inner(*args, **kwargs)

    lm.generate = spy
    return calls


@pytest.mark.parametrize("mode, expected", [("trl", [False, True, True]), ("update", [False, False, False])])
def test_trl_mode_samples_with_dropout_from_the_second_iteration_on(mode, expected):
    torch.manual_seed(0)
    trainer = Trainer(config(n_agents=2, dropout=mode), tiny_lm(dropout=0.1), tiny_tokenizer(), good_word_reward)
    calls = {a.name: dropout_active_during_generate(a.lm) for a in trainer.agents}
    for _ in range(3):
        trainer.step(QUERIES)
    assert calls == {"llm1": expected, "llm2": expected}
    assert trainer.generate_alone(QUERIES[:2], None, iteration=3) and calls["llm1"][-1] is False  # evaluation


def test_dropout_none_sets_every_rate_to_zero():
    agent = Agent("llm1", tiny_lm(dropout=0.1), PPOConfig(dropout="none"))
    rates = [m.p for m in list(agent.lm.modules()) + list(agent.value_head.modules()) if isinstance(m, nn.Dropout)]
    assert rates and set(rates) == {0.0}


def test_generate_with_dropout_samples_from_the_dropped_out_model():
    lm, tokenizer = tiny_lm(dropout=0.5), tiny_tokenizer()
    gen = config().ppo.generation
    out = {}
    for dropout in (False, True):
        torch.manual_seed(0)
        out[dropout] = generate(lm, tokenizer, QUERIES, gen, 6, dropout=dropout).response_ids
    torch.manual_seed(0)
    assert torch.equal(generate(lm, tokenizer, QUERIES, gen, 6).response_ids, out[False])
    assert not torch.equal(out[True], out[False])
    assert lm.training is False  # the model gets its own mode back


def one_step(mode: str, p: float, rollout: Rollout) -> Agent:
    """One PPO step (experience + 4 epochs) of a fresh agent whose policy and value head drop with rate p."""
    torch.manual_seed(0)
    cfg = PPOConfig(learning_rate=1e-3, batch_size=8, mini_batch_size=4, dropout=mode)
    agent = Agent("llm1", tiny_lm(dropout=p), cfg, value_dropout=p)
    exp = make_experience(agent, tiny_lm(), rollout, SCORES)
    ppo_update(agent, exp, generator=torch.Generator().manual_seed(0))
    return agent


@pytest.mark.parametrize("mode", ["trl", "update"])
def test_a_trl_step_is_bit_identical_at_dropout_0_1_and_0(mode):
    rollout = fixed_rollout(batch=8)
    with_dropout, without = one_step(mode, 0.1, rollout), one_step(mode, 0.0, rollout)
    same = all(torch.equal(a, b) for a, b in zip(with_dropout.parameters(), without.parameters()))
    assert same == (mode == "trl")


@pytest.mark.parametrize("mode", ["skip", "trl"])
def test_a_skipped_minibatch_moves_the_weights_only_in_trl_mode(mode):
    """After one ordinary step Adam has momentum; a step whose every mini-batch is over the ratio threshold then
    leaves the weights alone ("skip") or moves them along that momentum (trl's zero loss, still stepped on)."""
    rollout = fixed_rollout(batch=8)
    agent = one_step("none", 0.0, rollout)
    agent.cfg = dataclasses.replace(agent.cfg, ratio_threshold=0.5, ratio_threshold_mode=mode)  # every ratio ~1
    exp = make_experience(agent, tiny_lm(), rollout, SCORES)
    before = [p.detach().clone() for p in agent.parameters()]
    steps_before = [s["step"].item() for s in agent.optimizer.state.values()]
    stats = ppo_update(agent, exp)
    assert stats["skipped_minibatches"] == 8.0  # 4 epochs x 2 mini-batches
    moved = [not torch.equal(a, b) for a, b in zip(before, agent.parameters())]
    steps = [s["step"].item() for s in agent.optimizer.state.values()]
    if mode == "trl":
        assert all(moved) and steps == [n + 8 for n in steps_before]
    else:
        assert not any(moved) and steps == steps_before


def test_whitened_rewards_leave_padding_at_zero_unlike_trl():
    """Our whiten_rewards re-masks, so extra padding after the responses changes no advantage (in trl it would)."""
    cfg = PPOConfig(batch_size=8, mini_batch_size=8, whiten_rewards=True, dropout="none", use_score_scaling=False)
    torch.manual_seed(0)
    agent, ref = Agent("llm1", tiny_lm(), cfg), tiny_lm(seed=1)
    rollout = fixed_rollout(batch=8)
    rollout.response_mask[::2, -1] = 0  # uneven lengths: half the responses end a token early
    pad = torch.zeros(8, 3, dtype=torch.long)
    padded = Rollout(rollout.prompt_ids, rollout.prompt_mask, torch.cat([rollout.response_ids, pad], 1),
                     torch.cat([rollout.response_mask, pad], 1), rollout.prompts, rollout.responses)
    exp, exp_padded = (make_experience(agent, ref, r, SCORES) for r in (rollout, padded))
    assert torch.count_nonzero(exp_padded.rewards[:, 3:]) == 0
    for name in ("rewards", "advantages", "returns"):
        assert torch.allclose(getattr(exp_padded, name)[:, :3], getattr(exp, name), atol=1e-6), name


def test_dropout_mode_is_validated_and_the_old_flag_is_gone():
    with pytest.raises(ConfigError, match=r"train\.ppo\.dropout: must be one of \['none', 'trl', 'update'\], got 'on'"):
        PPOConfig(dropout="on")
    with pytest.raises(ConfigError, match=r"train\.ppo\.dropout: must be one of .*, got False"):
        from_dict(PPOConfig, yaml.safe_load("dropout: off"), "train.ppo")  # YAML 1.1 reads off as false
    with pytest.raises(ConfigError, match=r"ratio_threshold_mode: must be one of \['skip', 'trl'\]"):
        from_dict(PPOConfig, {"ratio_threshold_mode": "zero"}, "train.ppo")
    with pytest.raises(ConfigError, match=r"train\.ppo\.disable_dropout: unknown setting"):
        from_dict(PPOConfig, {"disable_dropout": True}, "train.ppo")
    assert PPOConfig().dropout == "none" and PPOConfig().ratio_threshold_mode == "skip"  # the measured settings
    assert PPOConfig.paper().dropout == "trl" and PPOConfig.paper().ratio_threshold_mode == "trl"  # trl's
