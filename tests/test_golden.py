"""Golden trajectory: three seeded iterations of PPO and of CORY on the tiny model must keep giving these numbers.

A change to the PPO math, the rollout or the trainer that moves them must say why (and update them) in its commit.
The numbers were recorded on CPU with torch 2.13 (the version CI installs).
"""

import pytest
import torch

from cory.rl.trainer import Trainer

from tiny import QUERIES, config, good_word_reward, tiny_lm, tiny_tokenizer

GOLDEN = {
    1: {"llm1/task_reward": 0.0458333, "llm1/kl": 0.2932603, "llm1/policy_loss": -0.0516181,
        "llm1/value_loss": 0.0169930, "llm1/kl_coef": 0.0099904, "llm1/entropy": 2.5684659},
    2: {"llm1/task_reward": 0.05, "llm1/kl": 0.1773634, "llm1/policy_loss": -0.0541037, "llm1/value_loss": 0.0323655,
        "llm1/kl_coef": 0.0099904, "llm1/entropy": 2.5804920, "llm2/kl": 0.2588023, "llm2/training_score": 0.075},
}


@pytest.mark.parametrize("n_agents", [1, 2])
def test_three_seeded_iterations_match_the_recorded_trajectory(n_agents):
    torch.manual_seed(0)
    trainer = Trainer(config(n_agents=n_agents, role_exchange_period=2), tiny_lm(), tiny_tokenizer(), good_word_reward)
    for _ in range(3):
        metrics = trainer.step(QUERIES)
    assert {k: metrics[k] for k in GOLDEN[n_agents]} == pytest.approx(GOLDEN[n_agents], rel=1e-4, abs=1e-6)
