"""An agent: what one LLM copy owns through a whole run, whatever role it plays.

A CORY agent (and the single PPO agent) is a causal LM with a scalar value head on its last hidden state, plus its
own Adam optimizer, KL controller and score normaliser. A role exchange swaps which agent plays which role; the
agent keeps all of this with it (the official code lost it at every swap by save-and-reload: CORY.md B1).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from cory.config import PPOConfig
from cory.ppo import AdaptiveKLController, FixedKLController, RunningMoments


class ValueHead(nn.Module):
    """Dropout + Linear(hidden -> 1), as trl's `AutoModelForCausalLMWithValueHead` (CORY.md §3.8)."""

    def __init__(self, hidden_size: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.summary = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T, 1)
        return self.summary(self.dropout(hidden.to(self.summary.weight.dtype)))


def hidden_size(lm) -> int:
    config = lm.config
    for name in ("hidden_size", "n_embd", "d_model"):
        if getattr(config, name, None):
            return getattr(config, name)
    raise ValueError(f"cannot find the hidden size of {type(lm).__name__}")


def disable_dropout(model: nn.Module) -> None:
    """Every nn.Dropout in `model` to p = 0 (transformers' attention reads its dropout module's p as well)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def make_kl_controller(cfg: PPOConfig):
    if cfg.adaptive_kl:
        return AdaptiveKLController(cfg.init_kl_coef, cfg.kl_target, cfg.kl_horizon)
    return FixedKLController(cfg.init_kl_coef)


class Agent:
    """One LLM copy under training: policy + value head, optimizer, KL controller and score normaliser."""

    def __init__(self, name: str, lm, cfg: PPOConfig, value_dropout: float = 0.1):
        self.name = name
        self.lm = lm
        self.cfg = cfg
        device = next(lm.parameters()).device
        if cfg.dropout == "none":
            disable_dropout(lm)
            value_dropout = 0.0
        self.value_head = ValueHead(hidden_size(lm), value_dropout).to(device)
        if cfg.zero_init_value_head:
            nn.init.zeros_(self.value_head.summary.weight)
            nn.init.zeros_(self.value_head.summary.bias)
        self.reset_training_state()

    def reset_training_state(self) -> None:
        """Fresh optimizer, KL coefficient and score moments: the start of a run, and (only with
        `cory.reset_on_exchange`) what the official code did at every role exchange."""
        self.optimizer = torch.optim.Adam(self.parameters(), lr=self.cfg.learning_rate)
        self.kl_ctl = make_kl_controller(self.cfg)
        self.score_moments = RunningMoments()

    def training_state(self) -> dict:
        """The agent's PPO state besides weights and optimizer (KL coefficient, score moments), JSON-serialisable."""
        m = self.score_moments
        return {"kl_coef": self.kl_ctl.value, "score_moments": [m.mean, m.var, m.std, m.count]}

    def load_training_state(self, state: dict) -> None:
        self.kl_ctl.value = state["kl_coef"]
        m = self.score_moments
        m.mean, m.var, m.std, m.count = state["score_moments"]

    def parameters(self) -> list[nn.Parameter]:
        return [p for p in list(self.lm.parameters()) + list(self.value_head.parameters()) if p.requires_grad]

    @property
    def device(self) -> torch.device:
        return next(self.lm.parameters()).device

    def train(self, mode: bool = True) -> None:
        self.lm.train(mode)
        self.value_head.train(mode)

    def save(self, path: str | Path, tokenizer=None) -> None:
        """A plain transformers model folder (loadable without this library) + value_head.safetensors + training state.

        LoRA adapters are merged into a copy of the weights first, so the folder needs neither peft nor this library."""
        path = Path(path)
        lm = self.lm
        if hasattr(lm, "merge_and_unload"):
            lm = copy.deepcopy(lm).merge_and_unload()
        lm.save_pretrained(path)
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
        save_file(self.value_head.state_dict(), str(path / "value_head.safetensors"))
        with open(path / "agent_state.json", "w") as fh:
            json.dump({"name": self.name, "kl_coef": self.kl_ctl.value, "score_mean": self.score_moments.mean,
                       "score_std": self.score_moments.std}, fh, indent=2)


def with_lora(lm, rank: int, alpha: float):
    """Wrap `lm` with trainable LoRA adapters (peft); the base weights stay frozen."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(lm, LoraConfig(r=rank, lora_alpha=alpha, bias="none", task_type="CAUSAL_LM"))


def frozen_reference(lm):
    """The frozen initial model pi_0 that both agents' KL is measured against (one shared copy)."""
    ref = copy.deepcopy(lm)
    ref.eval()
    ref.requires_grad_(False)
    return ref
