"""CORY's roles (paper §3.1): who plays pioneer and observer, the observer's prompt, and the collective reward.

Roles are separate from identities: LLM1 is the copy that starts as pioneer, LLM2 the one that starts as observer.
A role exchange (Eq. 5) swaps references to the agents; nothing is saved, reloaded or rebuilt. With LoRA on a shared
base each agent is bound to its own adapter, so an exchange swaps adapters, each with its optimizer state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, Sequence, TypeVar

if TYPE_CHECKING:  # tensors only pass through here
    import torch

A = TypeVar("A")

def observer_prompts(template: str, queries: Sequence[str], pioneer_responses: Sequence[str]) -> list[str]:
    """Knowledge transfer (Eq. 3): the observer's prompt holds the query and the pioneer's response."""
    if len(queries) != len(pioneer_responses):
        raise ValueError(f"{len(queries)} queries but {len(pioneer_responses)} pioneer responses")
    return [template.format(query=q, response=r) for q, r in zip(queries, pioneer_responses)]


def collective_reward(own: torch.Tensor, partner: torch.Tensor, partner_coef: float) -> torch.Tensor:
    """r_self + c * r_partner (Eq. 4 with c = 1; c < 0 is the competitive variant). (B,) x 2 -> (B,)."""
    return own + partner_coef * partner


class Roles(Generic[A]):
    """Which agent is pioneer and which is observer. With one agent there is only a pioneer (plain PPO)."""

    def __init__(self, agents: Sequence[A]):
        if len(agents) not in (1, 2):
            raise ValueError(f"CORY has one (PPO) or two agents, got {len(agents)}")
        self.agents = list(agents)  # identities, in order: LLM1, LLM2
        self.swapped = False

    @property
    def pioneer(self) -> A:
        return self.agents[1] if self.swapped else self.agents[0]

    @property
    def observer(self) -> A | None:
        if len(self.agents) == 1:
            return None
        return self.agents[0] if self.swapped else self.agents[1]

    def exchange(self) -> None:
        """Eq. 5: the pioneer becomes the observer and vice versa."""
        if len(self.agents) == 2:
            self.swapped = not self.swapped


def exchange_due(iteration: int, period: int) -> bool:
    """Algorithm 1: exchange after iteration k when (k + 1) % T_REx == 0 (k counted from 0)."""
    return (iteration + 1) % period == 0
