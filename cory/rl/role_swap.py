"""The role-swap test: after training, each CORY agent answers in the role it did not play last.

CORY exchanges roles so that either model can answer alone at the end (paper §3.1); two policies trained in fixed
roles may each be good only in its own. The test asks held-out queries (tasks.<task>.held_out: prompts no iteration
drew) twice: as trained, the last pioneer answering and the last observer answering seeing its answer (with knowledge
transfer; else the pioneer's prompt); and swapped, the last observer as pioneer and the last pioneer as its observer.
Each answer is scored by the task reward against the raw query, as in training (Algorithm 1, lines 12-13).

`swap_change` of a role is the mean task reward of that role played by the agent that did not play it last, less that
of the agent that did: below 0, the role's reward falls when the agents swap. A mean with no finite score
(ppo.on_nonfinite: skip) is null.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from cory.rl.ppo import NonFiniteError
from cory.rl.roles import observer_prompts

ROLES = ("pioneer", "observer")


def arrangement(trainer, pioneer, observer, queries: Sequence[str], answers: Sequence[str] | None
                ) -> dict[str, list[float]]:
    """`pioneer` answers the queries, `observer` answers seeing each of its answers (Eq. 3), both at the longest
    response length and in eval mode (no dropout), as LLM1's logged samples: role -> its (B,) task scores."""
    cfg = trainer.cfg
    length = cfg.ppo.generation.response_length[1]
    prompts = [cfg.prompt_template.format(query=q) for q in queries]
    first = trainer._generate(pioneer, prompts, length)
    seen = (observer_prompts(cfg.cory.observer_template, queries, first.responses) if cfg.cory.knowledge_transfer
            else prompts)
    second = trainer._generate(observer, seen, length)
    scores = trainer.reward_fn(list(queries) * 2, first.responses + second.responses,
                               None if answers is None else list(answers) * 2)
    scores = [float(s) for s in scores]
    return {"pioneer": scores[: len(queries)], "observer": scores[len(queries) :]}


def role_swap_test(trainer, queries: Sequence[str], answers: Sequence[str] | None = None) -> dict:
    """Both arrangements on `queries` (see the module docstring), sampled from a fork of the RNG state so that
    nothing after it samples otherwise. Returns role_swap.json's content: the roles each agent played last, each
    agent's mean task reward in each role, and each role's `swap_change`. A score that is not finite stops the run
    (ppo.on_nonfinite: error) or is left out of its mean (skip; `nonfinite` counts them)."""
    pioneer, observer = trainer.roles.pioneer, trainer.roles.observer
    if observer is None:
        raise ValueError("the role-swap test needs two agents (train.cory.n_agents: 2)")
    device = pioneer.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        played = arrangement(trainer, pioneer, observer, queries, answers)
        swapped = arrangement(trainer, observer, pioneer, queries, answers)
    scores = {pioneer.name: {"pioneer": played["pioneer"], "observer": swapped["observer"]},
              observer.name: {"pioneer": swapped["pioneer"], "observer": played["observer"]}}
    bad = sum(not math.isfinite(s) for by_role in scores.values() for role in ROLES for s in by_role[role])
    if bad and trainer.cfg.ppo.on_nonfinite == "error":
        raise NonFiniteError(f"role-swap test: the task reward returned {bad} non-finite scores (ppo.on_nonfinite: "
                             "skip leaves them out of the means)")
    reward = {name: {role: _mean(by_role[role]) for role in ROLES} for name, by_role in scores.items()}
    last = {"pioneer": pioneer.name, "observer": observer.name}
    other = {"pioneer": observer.name, "observer": pioneer.name}
    return {
        "queries": len(queries),
        "response_length": trainer.cfg.ppo.generation.response_length[1],
        "role_exchange": trainer.cfg.cory.role_exchange,
        "last_role": {pioneer.name: "pioneer", observer.name: "observer"},
        "task_reward": reward,
        "swap_change": {role: _difference(reward[other[role]][role], reward[last[role]][role]) for role in ROLES},
        "nonfinite": bad,
    }


def _mean(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b
