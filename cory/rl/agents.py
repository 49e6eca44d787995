"""An agent: what one LLM copy owns through a whole run, whatever role it plays.

A CORY agent (and the single PPO agent) is a causal LM with a scalar value head on its last hidden state, plus its
own Adam optimizer, KL controller and score normaliser; under a critic-free algorithm (train.algorithm rloo or grpo)
it has no value head. A role exchange swaps which agent plays which role; the
agent keeps all of this with it (the official code lost it at every swap by save-and-reload: docs/algorithm.md).

Two ways to hold the LM copies (`build_agents`):

- full fine-tuning: each agent owns a whole copy of the model, and a third frozen copy is the reference pi_0;
- LoRA (`train.lora_rank`): ONE frozen base holds one named LoRA adapter per agent ("llm1", "llm2"), and the
  reference is that same base with the adapters switched off. The official code's 7B setting (LoraConfig r=16,
  alpha=16, bias none, on a 4-bit base: docs/algorithm.md) then needs one copy of the 7B weights, not three.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from cory.rl.config import GRPOConfig, PPOConfig, TrainConfig
from cory.rl.kernels import bf16_copy, compiled_forward
from cory.rl.lora import (AdaptersDisabled, dequantize_4bit_base, merged_state_dict, plain_model,
                          with_lora_adapters)
from cory.rl.ppo import AdaptiveKLController, FixedKLController, RunningMoments


class ValueHead(nn.Module):
    """Dropout + Linear(hidden -> 1), as trl's `AutoModelForCausalLMWithValueHead` (docs/algorithm.md)."""

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
    """One LLM copy under training: policy + value head, optimizer, KL controller and score normaliser.

    `algorithm` is train.algorithm: "ppo" has the value head; "rloo" and "grpo" have none (`value_head` None), and
    GRPO's KL coefficient is `grpo.kl_coef`, fixed. `adapter` names this agent's LoRA adapter in a peft model that
    other agents share (None: the agent owns every weight of `lm`). A shared model runs whichever adapter was
    activated last, so every forward, backward and generation of this agent starts with `activate()`; the optimizer
    covers only this adapter and the value head."""

    def __init__(self, name: str, lm, cfg: PPOConfig, value_dropout: float = 0.1, adapter: str | None = None,
                 algorithm: str = "ppo", grpo: GRPOConfig | None = None):
        self.name = name
        self.lm = lm
        self.cfg = cfg
        self.adapter = adapter
        self.algorithm = algorithm
        self.grpo = grpo or GRPOConfig()
        device = next(lm.parameters()).device
        if cfg.dropout == "none":
            disable_dropout(lm)
            value_dropout = 0.0
        self.value_head = ValueHead(hidden_size(lm), value_dropout).to(device) if algorithm == "ppo" else None
        if self.value_head is not None and cfg.zero_init_value_head:
            nn.init.zeros_(self.value_head.summary.weight)
            nn.init.zeros_(self.value_head.summary.bias)
        # The LM the passes run on: the LM itself, or its bf16 copy (ppo.speed.bf16_weights), whose weights follow the
        # fp32 ones the optimizer steps (collect_gradients, refresh_copy).
        self.compute_lm = bf16_copy(lm) if cfg.speed.bf16_weights else lm
        # The callable of the experience's and update's forward passes: that LM, its body and output layer apart
        # (ppo.speed.last_hidden), either compiled (ppo.speed.compile; it shares the LM's weights, and sampling keeps
        # the LM's own forward).
        self.forward_lm = compiled_forward(self.compute_lm, cfg.speed)
        self.reset_training_state()

    def activate(self) -> None:
        """Route the shared model through this agent's adapter (a no-op for an agent that owns its weights)."""
        if self.adapter is not None:
            self.lm.set_adapter(self.adapter)

    def reset_training_state(self) -> None:
        """Fresh optimizer, KL coefficient and score moments: the start of a run, and (only with
        `cory.reset_on_exchange`) what the official code did at every role exchange."""
        params = self.parameters()
        # One fused kernel per step on a GPU instead of a handful per parameter tensor (same update up to rounding).
        fused = params[0].device.type == "cuda"
        self.optimizer = torch.optim.Adam(params, lr=self.cfg.learning_rate, fused=fused)
        # GRPO's beta: a fixed coefficient of its loss (train.grpo.kl_coef), as trl's; PPO and RLOO penalise the reward
        self.kl_ctl = FixedKLController(self.grpo.kl_coef) if self.algorithm == "grpo" else make_kl_controller(self.cfg)
        self.score_moments = RunningMoments()

    def training_state(self) -> dict:
        """The agent's PPO state besides weights and optimizer (KL coefficient, score moments), JSON-serialisable."""
        m = self.score_moments
        return {"kl_coef": self.kl_ctl.value, "score_moments": [m.mean, m.var, m.std, m.count]}

    def load_training_state(self, state: dict) -> None:
        self.kl_ctl.value = state["kl_coef"]
        m = self.score_moments
        m.mean, m.var, m.std, m.count = state["score_moments"]

    def lm_weights(self) -> dict[str, nn.Parameter]:
        """The LM weights this agent trains, by name: its adapter's (selected by name, since peft marks only the
        active adapter trainable), or every trainable weight of a model it owns."""
        if self.adapter is not None:
            return {n: p for n, p in self.lm.named_parameters() if self.adapter in n.split(".")}
        return {n: p for n, p in self.lm.named_parameters() if p.requires_grad}

    def parameters(self) -> list[nn.Parameter]:
        head = [] if self.value_head is None else [p for p in self.value_head.parameters() if p.requires_grad]
        return list(self.lm_weights().values()) + head

    def _copy_pairs(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(the fp32 LM weights, the bf16 copy's weights at the same names), cached: the tensors stay the same."""
        if not hasattr(self, "_pairs"):
            weights, copies = self.lm_weights(), dict(self.compute_lm.named_parameters())
            self._pairs = list(weights.values()), [copies[name] for name in weights]
        return self._pairs

    def collect_gradients(self) -> None:
        """ppo.speed.bf16_weights: add the bf16 copy's gradients of the last backward to the fp32 weights' (in fp32, so
        that accumulated micro-batches sum there) and clear the copy's. A no-op without the copy.

        The fp32 gradients live from an optimizer step's first backward to its step (zero_grad frees them): views of
        one buffer made here, not kept between steps, so that they hold no memory while the next passes' activations
        do (the other agent's included: 0.5 GiB each at SmolLM2's size)."""
        if self.compute_lm is self.lm:
            return
        weights, copies = self._copy_pairs()
        have = [i for i, c in enumerate(copies) if c.grad is not None]
        fresh = [i for i in have if weights[i].grad is None]
        adding = [i for i in have if weights[i].grad is not None]
        if fresh:
            sizes = [weights[i].numel() for i in fresh]
            flat = torch.empty(sum(sizes), dtype=weights[fresh[0]].dtype, device=weights[fresh[0]].device)
            grads = [part.view_as(weights[i]) for i, part in zip(fresh, flat.split(sizes))]
            torch._foreach_copy_(grads, [copies[i].grad for i in fresh])
            for i, grad in zip(fresh, grads):
                weights[i].grad = grad
        if adding:
            torch._foreach_add_([weights[i].grad for i in adding], [copies[i].grad for i in adding])
        for c in copies:
            c.grad = None

    @torch.no_grad()
    def refresh_copy(self) -> None:
        """ppo.speed.bf16_weights: the fp32 weights (after an optimizer step or a checkpoint's load) onto the bf16 copy,
        rounded to nearest. A no-op without the copy."""
        if self.compute_lm is not self.lm:
            weights, copies = self._copy_pairs()
            torch._foreach_copy_(copies, weights)

    @property
    def device(self) -> torch.device:
        return next(self.lm.parameters()).device

    def train(self, mode: bool = True) -> None:
        self.lm.train(mode)
        self.compute_lm.train(mode)
        if self.value_head is not None:
            self.value_head.train(mode)

    def save(self, path: str | Path, tokenizer=None) -> None:
        """A plain transformers model folder (loadable without this library) + value_head.safetensors (PPO's) + training
        state.

        An adapter agent's folder holds base + its adapter merged (W + scale * B A per LoRA layer, a 4-bit base
        dequantised), computed beside the shared model, which is left as it was: the other agent's adapter and the
        reference still sit on the untouched base."""
        path = Path(path)
        if self.adapter is None:
            self.lm.save_pretrained(path)
        else:
            plain_model(self.lm, merged_state_dict(self.lm, self.adapter)).save_pretrained(path)
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
        if self.value_head is not None:
            save_file(self.value_head.state_dict(), str(path / "value_head.safetensors"))
        with open(path / "agent_state.json", "w") as fh:
            json.dump({"name": self.name, "kl_coef": self.kl_ctl.value, "score_mean": self.score_moments.mean,
                       "score_std": self.score_moments.std}, fh, indent=2)


def build_agents(cfg: TrainConfig, lm) -> tuple[list[Agent], object]:
    """LLM1 (and LLM2 for CORY: the duplication of paper §3.1) and the reference pi_0 both are measured against.

    Full fine-tuning (train.lora_rank null) changes every weight, so each agent needs its own copy and the reference
    a frozen third: 2 copies of the weights for PPO, 3 for CORY. With LoRA the base never changes, so the copies are
    adapters: one peft model holds an adapter per agent and the reference is that model with its adapters disabled,
    one copy of the base whatever the number of agents (what lets Llama-2-7b CORY fit one 80 GB GPU)."""
    names = [f"llm{i + 1}" for i in range(cfg.cory.n_agents)]
    if cfg.lora_rank is None:
        reference = frozen_reference(lm)
        if cfg.ppo.speed.bf16_weights:
            reference.to(torch.bfloat16)
        reference = compiled_forward(reference, cfg.ppo.speed)
        copies = [lm] + [copy.deepcopy(lm) for _ in names[1:]]
        return [Agent(n, c, cfg.ppo, algorithm=cfg.algorithm, grpo=cfg.grpo) for n, c in zip(names, copies)], reference
    shared = with_lora_adapters(lm, names, cfg.lora_rank, cfg.lora_alpha)
    if cfg.ppo.speed.dequantize_4bit:
        dequantize_4bit_base(shared)
    return ([Agent(n, shared, cfg.ppo, adapter=n, algorithm=cfg.algorithm, grpo=cfg.grpo) for n in names],
            AdaptersDisabled(shared))


def frozen_reference(lm):
    """The frozen initial model pi_0 that both agents' KL is measured against (one shared copy; full fine-tuning)."""
    ref = copy.deepcopy(lm)
    ref.eval()
    ref.requires_grad_(False)
    return ref
