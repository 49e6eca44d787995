"""ppo.speed.update_batch_size: the mini-batches of one optimizer step in fewer, larger passes take the same step."""

import dataclasses

import pytest
import torch

from cory.rl.agents import Agent
from cory.rl.config import PPOConfig, SpeedConfig
from cory.rl.learner import make_experience, ppo_update
from cory.rl.lora import AdaptersDisabled
from cory.schema import ConfigError

from tiny import fixed_rollout, tiny_llama, tiny_lm

SCORES = torch.tensor([1.0, 0.0, -1.0, 0.5, 0.25, -0.5, 2.0, 0.0, 0.3, -0.2, 1.5, 0.1, -1.0, 0.7, 0.0, 0.4])


def uneven_rollout():
    """16 rows whose responses end at different lengths, so that a mean over a whole pass would weigh tokens
    differently from trl's per-mini-batch masked means."""
    rollout = fixed_rollout(batch=16)
    rollout.response_mask[::3, -1] = 0
    rollout.response_mask[::5, 1:] = 0
    return rollout


def tiny_llama_with_adapters():
    """The paper's 7B setting in miniature: a tiny Llama with one LoRA adapter (r 4) per agent, the base frozen."""
    from cory.rl.lora import with_lora_adapters

    model = with_lora_adapters(tiny_llama(), ["llm1", "llm2"], 4, 8.0)
    with torch.no_grad():  # non-zero B matrices: peft starts them at zero
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    return model


def one_step(update_batch_size, sgd=False, llama=False, **ppo):
    """One PPO step of a fresh agent (mini-batches of 2, 4 accumulated: 2 optimizer steps per epoch, 4 epochs), on
    the tiny GPT-2 or (`llama`) on a LoRA adapter of a tiny Llama. `sgd`: plain SGD instead of Adam, whose
    normalisation turns a gradient's rounding near 0 into a step of lr."""
    torch.manual_seed(0)
    cfg = PPOConfig(learning_rate=1e-3, batch_size=16, mini_batch_size=2, gradient_accumulation_steps=4,
                    dropout="none", speed=SpeedConfig(update_batch_size=update_batch_size), **ppo)
    agent = Agent("llm1", tiny_llama_with_adapters(), cfg, adapter="llm1") if llama else Agent("llm1", tiny_lm(), cfg)
    if sgd:
        agent.optimizer = torch.optim.SGD(agent.parameters(), lr=0.1)
    agent.initial = [p.detach().clone() for p in agent.parameters()]
    rollout = uneven_rollout()
    reference = AdaptersDisabled(agent.lm) if llama else tiny_lm(seed=1)
    exp = make_experience(agent, reference, rollout, SCORES)
    stats = ppo_update(agent, exp, generator=torch.Generator().manual_seed(0))
    return agent, stats


@pytest.mark.parametrize("llama", [False, True], ids=["gpt2", "llama lora"])
@pytest.mark.parametrize("update_batch_size", [4, 8])
def test_larger_passes_take_the_same_optimizer_steps(update_batch_size, llama):
    one, stats_one = one_step(None, sgd=True, llama=llama)
    fused, stats_fused = one_step(update_batch_size, sgd=True, llama=llama)
    assert any(not torch.equal(a, b) for a, b in zip(one.parameters(), one.initial))  # the step moved them
    for a, b in zip(one.parameters(), fused.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # The clip fractions count tokens: one whose clipped and unclipped values agree up to rounding (trl's strict >)
    # may count in one and not in the other, 1 token of a 2-row mini-batch = 0.2 / 32 mini-batches
    continuous = [k for k in stats_one if "clipfrac" not in k]
    assert {k: stats_fused[k] for k in continuous} == pytest.approx({k: stats_one[k] for k in continuous}, rel=1e-5,
                                                                    abs=1e-7)
    for k in ("policy_clipfrac", "value_clipfrac"):
        assert stats_fused[k] == pytest.approx(stats_one[k], abs=0.2 / 32 + 1e-6)


@pytest.mark.parametrize("mode", ["skip", "trl"])
def test_a_pass_of_mini_batches_over_the_ratio_threshold_skips_each_as_alone(mode):
    """Every mini-batch over the threshold: "skip" gives Adam nothing to step on (no state), "trl" steps on zero
    gradients (8 steps; from a fresh optimizer they move nothing); counted per mini-batch either way."""
    for update_batch_size in (None, 8):
        agent, stats = one_step(update_batch_size, ratio_threshold=1e-3, ratio_threshold_mode=mode)
        fresh = Agent("x", tiny_lm(), agent.cfg)
        assert all(torch.equal(a, b) for a, b in zip(agent.lm.parameters(), fresh.lm.parameters()))
        assert stats["skipped_minibatches"] == 32.0  # 4 epochs x 8 mini-batches
        steps = {s["step"].item() for s in agent.optimizer.state.values()}
        assert steps == (set() if mode == "skip" else {8.0})


def test_update_batch_size_must_tile_the_optimizer_step():
    for bad in (3, 16):
        with pytest.raises(ConfigError, match=r"train\.ppo\.speed\.update_batch_size: must be a multiple of "
                                              r"mini_batch_size = 2 that divides .* = 8, or a divisor of "
                                              r"mini_batch_size, got"):
            PPOConfig(batch_size=16, mini_batch_size=2, gradient_accumulation_steps=4,
                      speed=SpeedConfig(update_batch_size=bad))
    cfg = PPOConfig(batch_size=16, mini_batch_size=2, gradient_accumulation_steps=4,
                    speed=SpeedConfig(update_batch_size=8))
    assert cfg.update_pass_size == 8 and dataclasses.replace(cfg, speed=SpeedConfig()).update_pass_size == 2
