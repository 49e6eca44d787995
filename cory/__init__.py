"""CORY: sequential cooperative multi-agent RL fine-tuning of language models (Ma et al., NeurIPS 2024).

The library on a model of your own (examples/cory_on_your_model.py runs this):

    from cory import CORYConfig, PPOConfig, TrainConfig, Trainer, load_tokenizer

    cfg = TrainConfig(ppo=PPOConfig(batch_size=16, mini_batch_size=8),
                      cory=CORYConfig(observer_template="Improve: {query}{response}\\n{query}"))
    trainer = Trainer(cfg, lm, tokenizer, reward)  # any transformers causal LM; reward: RewardFn
    for batch in batches_of_queries:                # cfg.ppo.queries_per_batch queries each
        metrics = trainer.step(batch)
    trainer.save("trained")                         # trained/llm1, trained/llm2: plain transformers folders

`CORYConfig(n_agents=1)` is the single-agent PPO baseline through the same code. The defaults are the settings this
project measured to work; `TrainConfig.paper_imdb()` and `PPOConfig.paper()` are the paper's. The reward contract:
`RewardFn` (cory.rl.reward). The names below load on first use: `import cory` alone imports no torch.
"""

from __future__ import annotations

import importlib

# name -> the module that defines it; loaded on first use (no import statement here: a stage that imports one module
# of this package depends on that module, not on every one named below)
_WHERE = {
    **{name: "cory.rl" for name in ("Trainer", "TrainConfig", "PPOConfig", "CORYConfig", "GenerationConfig",
                                    "SpeedConfig", "IMDB_OBSERVER_TEMPLATE", "RewardFn", "RewardError",
                                    "NonFiniteError")},
    "ConfigError": "cory.schema",
    "load_tokenizer": "cory.tasks.tokenizer",
    "load_agent": "cory.runs.run",
}

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'cory' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
