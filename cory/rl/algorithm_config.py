"""What CORY and GRPO add to PPO's settings: `train.cory` (CORYConfig: the two agents, their roles and the
observer's prompt) and `train.grpo` (GRPOConfig: GRPO's loss). cory.rl.config's TrainConfig holds them beside
`train.ppo`, and names them for the code that imports the config tree from there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cory.schema import check, section_path


IMDB_OBSERVER_TEMPLATE = 'I can make this sentence "{query}{response}" more positive: {query}'
"""The official code's knowledge-transfer prompt for IMDB (the paper's sentiment task)."""


@dataclass
class CORYConfig:
    """CORY on top of PPO (paper §3, Algorithm 1). `n_agents: 1` is single-agent PPO through the same trainer."""

    n_agents: Literal[1, 2] = 2
    """1 = single-agent PPO baseline (only the pioneer exists); 2 = CORY (pioneer + observer)."""
    role_exchange_period: int = 5
    """T_REx: roles are exchanged after every T_REx iterations."""
    role_exchange: bool = True
    """Ablation switch: False never exchanges roles (the 'w/o REx' ablation)."""
    knowledge_transfer: bool = True
    """Ablation switch: False shows the observer only the query (the 'w/o KT' ablation)."""
    partner_reward_coef: float = 1.0
    """c in r_self + c * r_partner: 1 is the paper's cooperative sum, c < 0 competitive, 0 independent."""
    reset_on_exchange: bool = False
    """Reproduce the official code: reset each agent's optimizer, KL coefficient and score normaliser at every swap."""
    observer_template: str | None = None
    """Knowledge-transfer prompt of the observer; {query} and {response} are the query and the pioneer's answer
    (IMDB's: IMDB_OBSERVER_TEMPLATE). Required for CORY with knowledge transfer: it is the task's own (an IMDB prompt
    applied to another task would ask for the wrong thing). Without knowledge transfer the observer gets the pioneer's
    prompt (`train.prompt_template`)."""

    def __post_init__(self) -> None:
        path = section_path("train.cory")
        check(self.n_agents in (1, 2), f"{path}.n_agents", f"must be 1 (PPO) or 2 (CORY), got {self.n_agents}")
        check(
            self.role_exchange_period > 0,
            f"{path}.role_exchange_period",
            f"T_REx must be a positive number of iterations, got {self.role_exchange_period}",
        )
        template = self.observer_template
        check(template is None or ("{query}" in template and "{response}" in template), f"{path}.observer_template",
              "must contain both {query} and {response}")

    @property
    def needs_observer_template(self) -> bool:
        """Whether the observer reads `observer_template`: CORY (two agents) with knowledge transfer."""
        return self.n_agents == 2 and self.knowledge_transfer

    def check_observer_template(self, setting: str = "train.cory.observer_template") -> None:
        """A ConfigError naming `setting` where CORY with knowledge transfer has no observer prompt of its task's. Not
        checked at construction: a train block may be written without it where the task fills it in (the pipeline's
        tasks.<task>.observer_template)."""
        check(self.observer_template is not None or not self.needs_observer_template, setting,
              "required for CORY with knowledge transfer: the observer's prompt for this task, with {query} and "
              "{response} (the pioneer's answer), e.g. IMDB's " + repr(IMDB_OBSERVER_TEMPLATE))


@dataclass
class GRPOConfig:
    """GRPO's own settings (params `train.grpo`, read with train.algorithm: grpo; docs/algorithm.md). Its clip range,
    epochs and mini-batches are train.ppo's (`cliprange`, `ppo_epochs`, `mini_batch_size`), its group k is
    `ppo.samples_per_query`."""

    kl_coef: float = 0.0
    """beta of the KL term in GRPO's loss: beta x the k3 estimate of KL(pi_theta || pi_ref) per token (TRL's `beta`).
    0, TRL's default, leaves the reference out of the loss (it is still measured: the `kl` metric)."""
    kl_importance_weight: bool = True
    """Weight the k3 term by the token's ratio pi_theta / pi_old (TRL's `use_bias_correction_kl`, its default: an
    unbiased reverse-KL gradient off-policy); false is DeepSeekMath's objective, the k3 term alone."""

    def __post_init__(self) -> None:
        check(self.kl_coef >= 0, f"{section_path('train.grpo')}.kl_coef", f"must be >= 0, got {self.kl_coef}")
