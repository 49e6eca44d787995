"""The whole params tree, validated at once: `python -m pipeline.params` (also the first thing every stage does).

Each top-level key of params.yaml maps to the typed section that reads it. An unknown key anywhere, a wrong type or
an impossible value is one `ConfigError` naming the setting, raised before any data is read or model trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from cory.config import ConfigError, CORYConfig, TrainConfig, from_dict, merge


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
        # A section left empty (`train:`) is null, which from_dict would read as "all defaults": an error instead.
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: must be a mapping, got {type(value).__name__}")
        return value

    def typed(cls, key):
        return lambda params, value: from_dict(cls, mapping(value, key), key)

    def check_length(tokens: int, n_positions: int, key: str, limit: str) -> None:
        if tokens > n_positions:
            raise ConfigError(f"{key}: {tokens} tokens exceed the model's {limit} = {n_positions}")

    def data(params: dict, value: Any) -> None:
        value = mapping(value, "data")
        for key in value:
            if key not in ("imdb", "math"):
                raise ConfigError(f"data.{key}: unknown data set (known: imdb, math)")
        for key, cls in (("imdb", IMDBDataConfig), ("math", MathDataConfig)):
            if key not in value:
                raise ConfigError(f"data.{key}: section missing from params.yaml")
            typed(cls, f"data.{key}")(params, value[key])

    def base_model_name(name: Any, key: str, params: dict) -> None:
        known = params.get("base_models") or {}
        if name not in known:
            raise ConfigError(f"{key}: no base model {name!r} (known: {', '.join(known)})")

    def base_models(params: dict, value: Any) -> None:
        for name, entry in mapping(value, "base_models").items():
            cfg = from_dict(BaseModelConfig, mapping(entry, f"base_models.{name}"), f"base_models.{name}")
            if cfg.compare_params_with is not None:
                base_model_name(cfg.compare_params_with, f"base_models.{name}.compare_params_with", params)
            # pretrain_lm checks this too, but once the corpus is read; a scratch model's shape is known now.
            if cfg.source == "scratch":
                check_length(cfg.pretrain.seq_len, cfg.lm.n_positions, f"base_models.{name}.pretrain.seq_len",
                             f"base_models.{name}.lm.n_positions")

    def reward_model(params: dict, value: Any) -> None:
        cfg = typed(RewardModelConfig, "reward_model")(params, value)
        if cfg.source != "scratch":
            return
        # A scratch classifier starts from the init_from base model's body, or from nothing in the shape classifier.lm.
        if cfg.init_from is None:
            lm, where = cfg.classifier.lm, "reward_model.classifier.lm"
        else:
            base_model_name(cfg.init_from, "reward_model.init_from", params)
            body = from_dict(BaseModelConfig, params["base_models"][cfg.init_from], f"base_models.{cfg.init_from}")
            if body.source != "scratch":
                return  # a hub model's n_positions is known once it is loaded
            lm, where = body.lm, f"base_models.{cfg.init_from}.lm"
        check_length(cfg.classifier.max_length, lm.n_positions, "reward_model.classifier.max_length",
                     f"{where}.n_positions")

    def tasks(params: dict, value: Any) -> None:
        # Every run of a task reads its templates as train.prompt_template and train.cory.observer_template: they
        # are checked here, so that an error names the task's key, not a run's.
        for name, entry in mapping(value, "tasks").items():
            task = from_dict(TaskConfig, mapping(entry, f"tasks.{name}"), f"tasks.{name}")
            from_dict(TrainConfig, {"prompt_template": task.prompt_template}, f"tasks.{name}")
            from_dict(CORYConfig, {"observer_template": task.observer_template}, f"tasks.{name}")

    def experiments(params: dict, value: Any) -> None:
        base = params.get("train") or {}
        for group in mapping(value, "experiments"):
            exp, task = parse_experiment(params, group)
            # Each layer of overrides is checked where it is written (the group's train block, then each run's),
            # so that an error names a key the reader can find; expand_jobs then resolves every run x seed.
            group_train = merge(base, exp.train)
            from_dict(TrainConfig, group_train, f"experiments.{group}.train")
            for name, spec in exp.runs.items():
                from_dict(TrainConfig, merge(group_train, spec.train), f"experiments.{group}.runs.{name}.train")
            expand_jobs(group, exp, task, base, common.seeds(params), Path("runs"))

    return {
        "profile": lambda params, value: common.profile(params),
        "seeds": lambda params, value: common.seeds(params),
        "runtime": typed(RuntimeConfig, "runtime"),
        "data": data,
        "base_models": base_models,
        "reward_model": reward_model,
        "train": typed(TrainConfig, "train"),
        "tasks": tasks,
        "experiments": experiments,
        "evaluation": typed(EvaluateConfig, "evaluation"),
        "report": typed(ReportConfig, "report"),
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
