"""Two LoRA agents on one tiny base (the shared-LoRA and 4-bit tests): their config and Trainer, the base's weight
storages (a copy anywhere changes their count), adapters made non-trivial, an agent's logits on a rollout."""

import torch

from cory.rl.agents import Agent
from cory.rl.config import TrainConfig
from cory.rl.rollout import forward_response
from cory.rl.trainer import Trainer

from tiny import config, good_word_reward, tiny_lm, tiny_tokenizer


def lora_config_of(n_agents=2, **cory) -> TrainConfig:
    cfg = config(n_agents=n_agents, **cory)
    cfg.lora_rank = 4
    cfg.lora_alpha = 8.0  # scale 2, so an adapter's share of the output is not a plain 1x
    return cfg


def lora_trainer(n_agents=2, seed=0, **cory) -> Trainer:
    torch.manual_seed(seed)
    return Trainer(lora_config_of(n_agents, **cory), tiny_lm(), tiny_tokenizer(), good_word_reward)


def storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors}


def base_weights(model) -> list[torch.Tensor]:
    """Every parameter and buffer of `model` that is not a LoRA weight."""
    named = list(model.named_parameters()) + list(model.named_buffers())
    return [t for n, t in named if ".lora_" not in n]


def randomise_adapters(trainer: Trainer, seed: int = 1) -> None:
    """Non-zero B matrices (peft starts them at zero, which would make every adapter the identity)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for agent in trainer.agents:
            for p in agent.lm_weights().values():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)


def logits_of(agent: Agent, rollout) -> torch.Tensor:
    agent.activate()
    agent.train(False)
    with torch.no_grad():
        return forward_response(agent.lm, rollout)[0]
