"""The method (paper §3, Algorithm 1): PPO, the two CORY agents, their roles, rollouts and the training step.

Imports cory.schema and cory.hf only; what the RL runs on (data, rewards, base models) is cory.tasks'. The names
below load on first use, so that importing a torch-free module of this package (cory.rl.config) stays torch-free.
"""

from __future__ import annotations

import importlib

# name -> the module that defines it; no import statement here (see cory/__init__.py)
_WHERE = {
    "Trainer": "cory.rl.trainer",
    "TrainConfig": "cory.rl.config", "PPOConfig": "cory.rl.config", "CORYConfig": "cory.rl.config",
    "GenerationConfig": "cory.rl.config", "SpeedConfig": "cory.rl.config",
    "IMDB_OBSERVER_TEMPLATE": "cory.rl.config",
    "RewardFn": "cory.rl.reward", "RewardError": "cory.rl.reward",
    "NonFiniteError": "cory.rl.learner",
}

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'cory.rl' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
