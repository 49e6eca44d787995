"""ppo.speed.bf16_weights: the passes run on a bf16 copy of each agent's LM, the optimizer steps the fp32 weights, and the
copy follows them (on the CPU, where bf16 runs as on a GPU, without autocast either way)."""

import dataclasses

import pytest
import torch

from cory.rl.config import PPOConfig, SpeedConfig, TrainConfig
from cory.schema import ConfigError
from cory.rl.learner import make_experience, ppo_update
from cory.rl.trainer import Trainer

from tiny import QUERIES, config, good_word_reward, tiny_lm, tiny_tokenizer


def trainer(bf16_weights: bool, n_agents: int = 2, seed: int | None = None, **ppo) -> Trainer:
    cfg = config(n_agents=n_agents, iterations=6, dropout="none")
    speed = dataclasses.replace(cfg.ppo.speed, bf16_weights=bf16_weights)
    cfg = dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, speed=speed, **ppo))
    torch.manual_seed(seed or 0)
    return Trainer(cfg, tiny_lm(), tiny_tokenizer(), good_word_reward, seed=seed)


def in_step(agent) -> bool:
    """Whether the agent's bf16 copy holds exactly its fp32 weights rounded to bf16, name by name."""
    copies = dict(agent.compute_lm.named_parameters())
    return all(torch.equal(copies[name], w.detach().to(torch.bfloat16)) for name, w in agent.lm_weights().items())


def test_the_copy_follows_the_fp32_weights_the_optimizer_steps():
    run = trainer(True)
    agent = run.agents[0]
    before = [w.detach().clone() for w in agent.lm_weights().values()]
    for _ in range(3):
        run.step(QUERIES)
    assert all(next(a.compute_lm.parameters()).dtype == torch.bfloat16 for a in run.agents)
    assert all(w.dtype == torch.float32 for a in run.agents for w in a.lm_weights().values())
    assert next(run.ref_lm.parameters()).dtype == torch.bfloat16
    assert all(in_step(a) for a in run.agents)
    assert any(not torch.equal(b, w) for b, w in zip(before, agent.lm_weights().values()))  # it trained
    assert all(p.grad is None for a in run.agents for p in a.compute_lm.parameters())  # nothing left on the copy
    # steps below bf16's resolution are kept: some fp32 weight has moved while its bf16 copy still rounds to where
    # it started (an optimizer stepping the bf16 copy itself would have lost those steps)
    kept = [((w != b) & (w.to(torch.bfloat16) == b.to(torch.bfloat16))).any().item()
            for b, w in zip(before, agent.lm_weights().values())]
    assert any(kept)


def test_gradients_are_summed_in_fp32_over_accumulated_micro_batches():
    """Two micro-batches (gradient_accumulation_steps 2) give the fp32 weights the sum of the copy's two gradients."""
    run = trainer(True, n_agents=1, mini_batch_size=8, gradient_accumulation_steps=2)
    agent = run.agents[0]
    rollout = run._generate(agent, QUERIES, 4)
    exp = make_experience(agent, run.ref_lm, rollout, torch.linspace(-1, 1, len(QUERIES)))
    seen = []
    real_step = agent.optimizer.step

    def record(*args, **kwargs):
        seen.append([w.grad.clone() for w in agent.lm_weights().values()])
        return real_step(*args, **kwargs)

    agent.optimizer.step = record
    copies = dict(agent.compute_lm.named_parameters())
    grads = []
    real_collect = agent.collect_gradients

    def collect():
        grads.append({n: copies[n].grad.float().clone() for n in agent.lm_weights()})
        real_collect()

    agent.collect_gradients = collect
    cfg = dataclasses.replace(agent.cfg, ppo_epochs=1)
    agent.cfg = cfg
    ppo_update(agent, exp, torch.Generator().manual_seed(0))
    assert len(grads) == 2 and len(seen) == 1
    for got, name in zip(seen[0], agent.lm_weights()):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, grads[0][name] + grads[1][name], rtol=0, atol=0)


def test_it_learns_as_fp32_does_on_the_toy_task():
    """bf16 rounding, not another algorithm: on the toy task both raise the task reward from the same start, on the
    mean of three seeds. One seed alone does not tell: a few roundings apart, a 15-iteration run of this toy task goes
    either way (seed 0's bf16 run learns where oneDNN's matmuls run on AVX-512 and ends near 0 where they run on AMX:
    its first four iterations equal, then apart)."""
    for bf16 in (False, True):
        starts, ends = [], []
        for seed in (0, 1, 2):
            run = trainer(bf16, seed=seed)
            rewards = [run.step(QUERIES)["llm1/task_reward"] for _ in range(15)]
            starts.append(rewards[0])
            ends.append(sum(rewards[-3:]) / 3)
        assert sum(ends) / 3 > sum(starts) / 3 + 0.3, (bf16, starts, ends)


def test_config_errors_name_the_setting():
    with pytest.raises(ConfigError, match=r"ppo\.speed\.bf16_weights"):
        SpeedConfig(bf16_weights=True, mixed_precision=False)
    with pytest.raises(ConfigError, match=r"ppo\.speed\.bf16_weights"):
        TrainConfig(lora_rank=4, ppo=PPOConfig(speed=SpeedConfig(bf16_weights=True)))
