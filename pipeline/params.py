"""The whole params tree, validated at once: `python -m pipeline.params` (also the first thing every stage does).

Each top-level key of params.yaml maps to the typed section that reads it. An unknown key anywhere, a wrong type or
an impossible value is one `ConfigError` naming the setting, raised before any data is read or model trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from cory.config import ConfigError, TrainConfig, from_dict


def _sections() -> dict[str, Callable[[dict, Any], None]]:
    # Imported here: the section classes live beside the stages that read them.
    from cory.data import IMDBDataConfig
    from cory.experiments import TaskConfig, expand_jobs, parse_experiment
    from cory.mathgen import MathDataConfig
    from pipeline.base_models import BaseModelConfig
    from pipeline.evaluate import EvaluateConfig
    from pipeline.report import ReportConfig
    from pipeline.reward_model import RewardModelConfig
    from pipeline.train import RuntimeConfig
    from pipeline import common

    def mapping(value: Any, key: str) -> dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: must be a mapping, got {type(value).__name__}")
        return value

    def data(params: dict, value: Any) -> None:
        value = mapping(value, "data")
        for key in value:
            if key not in ("imdb", "math"):
                raise ConfigError(f"data.{key}: unknown data set (known: imdb, math)")
        from_dict(IMDBDataConfig, value.get("imdb"), "data.imdb")
        from_dict(MathDataConfig, value.get("math"), "data.math")

    def named(cls, key):
        def check(params: dict, value: Any) -> None:
            for name, entry in mapping(value, key).items():
                from_dict(cls, entry, f"{key}.{name}")

        return check

    def experiments(params: dict, value: Any) -> None:
        for group in mapping(value, "experiments"):
            exp, task = parse_experiment(params, group)
            expand_jobs(group, exp, task, params.get("train") or {}, common.seeds(params), Path("runs"))

    return {
        "profile": lambda params, value: common.profile(params),
        "seeds": lambda params, value: common.seeds(params),
        "runtime": lambda params, value: from_dict(RuntimeConfig, value, "runtime"),
        "data": data,
        "base_models": named(BaseModelConfig, "base_models"),
        "reward_model": lambda params, value: from_dict(RewardModelConfig, value, "reward_model"),
        "train": lambda params, value: from_dict(TrainConfig, value, "train"),
        "tasks": named(TaskConfig, "tasks"),
        "experiments": experiments,
        "evaluation": lambda params, value: from_dict(EvaluateConfig, value, "evaluation"),
        "report": lambda params, value: from_dict(ReportConfig, value, "report"),
    }


def validate(params: dict) -> None:
    """Raise one ConfigError naming the first wrong setting; return quietly if the whole tree is valid."""
    sections = _sections()
    for key in params:
        if key not in sections:
            raise ConfigError(f"{key}: unknown top-level setting (known: {', '.join(sections)})")
    for key, check in sections.items():
        if key not in params:
            raise ConfigError(f"{key}: section missing from params.yaml")
        check(params, params[key])


def main() -> None:
    from pipeline.common import load_params

    load_params()  # validates
    print("params.yaml: every setting is valid")


if __name__ == "__main__":
    from pipeline.common import run_stage

    run_stage(main)
