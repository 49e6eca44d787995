"""Experiments: named groups of RL runs (PPO and CORY variants x seeds) that share one `train` config block.

A run's config is `train` (the block every run reads) <- the group's overrides <- the run's overrides, plus its seed,
so the PPO baseline and every CORY variant differ only where params.yaml says they do. `expand_jobs` resolves every
(run, seed) of a group into a `Job`, with its validated TrainConfig, before any training; cory.runs.run trains one.
Torch-free: `pipeline.params` validates every run of every group through this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cory.rl.config import TrainConfig
from cory.schema import ConfigError, check, from_dict, merge, section_path


@dataclass
class TaskConfig:
    """What a task is: its base model, its RL prompts, its reward and its prompt templates."""

    model: str
    """Base model: a folder under the profile's models/ (e.g. imdb_small), another local folder, or a hub name."""
    prompts: str
    """RL prompt file (jsonl, rows with "query" or "question"; "answer" for math), relative to the project root."""
    reward: Literal["sentiment", "math"]
    """Task reward: the sentiment classifier's positive logit, or 0/1 math correctness."""
    reward_model: str | None = None
    """The sentiment classifier (folder or hub name); required for reward: sentiment."""
    reward_max_length: int = 512
    """The sentiment classifier reads at most this many of its tokens of each scored text, and never more than its
    positions. The profile's own classifier (reward_model: reward) reads as many as it was trained on:
    reward_model.classifier.max_length fills this."""
    reward_truncation: Literal["head", "tail"] = "head"
    """Which end of a longer text the classifier reads; reward_model.classifier.truncation fills it for the profile's
    own classifier."""
    prompt_template: str = TrainConfig.prompt_template
    """The pioneer's (and PPO's) prompt in every run of the task: each run's train.prompt_template. The math task's
    is also the pass@k prompt (evaluation.prompt_template)."""
    observer_template: str | None = None
    """The observer's prompt with knowledge transfer in every run of the task: each run's
    train.cory.observer_template. Required where a CORY run with knowledge transfer trains on the task."""
    table_queries: list[str] = field(default_factory=list)
    """Fixed queries LLM1 continues alone before and after training (the paper's Table 3); empty: the first
    `train.samples_to_log` RL prompts."""
    held_out: int = 0
    """The last `held_out` prompts of the prompt file, never drawn for training: the base model answers them before
    training and each trained agent alone after it (samples.jsonl rows with "held_out": true; samples.md sets them
    side by side), and a CORY run's agents answer them in the role each did not play last (the role-swap test:
    cory.rl.role_swap, role_swap.json). 0: none, and no role-swap test."""

    def __post_init__(self) -> None:
        path = section_path("task")
        check(self.reward != "sentiment" or bool(self.reward_model), f"{path}.reward_model", "required for sentiment")
        check(self.held_out >= 0, f"{path}.held_out", f"must be >= 0, got {self.held_out}")
        check(self.reward_max_length > 0, f"{path}.reward_max_length", f"must be > 0, got {self.reward_max_length}")
        check("{query}" in self.prompt_template, f"{path}.prompt_template", "must contain {query}")
        template = self.observer_template
        check(template is None or ("{query}" in template and "{response}" in template),
              f"{path}.observer_template", "must contain both {query} and {response}")


@dataclass
class RunSpec:
    """One run of a group: its own overrides on top of the group's."""

    model: str | None = None
    """Another base model for this run (e.g. the 2x model of the size ablation); null keeps the task's."""
    train: dict[str, Any] = field(default_factory=dict)
    """Overrides of the train block (e.g. {cory: {n_agents: 1}} for PPO)."""


@dataclass
class ExperimentConfig:
    """A group of runs on one task, each repeated over `seeds`."""

    task: str
    """Key of the task under `tasks`."""
    runs: dict[str, RunSpec]
    """Run name -> its overrides."""
    train: dict[str, Any] = field(default_factory=dict)
    """Overrides of the train block for every run of the group."""
    sweep_eta: list[float] = field(default_factory=list)
    """If set, every run is repeated at each KL coefficient eta (ppo.init_kl_coef), named <run>_eta<eta>."""
    save_models: bool = True
    """Save the trained agents (needed for Pass@k evaluation)."""
    seeds: list[int] | None = None
    """The seeds this group's runs are repeated over: a subset of the top-level `seeds` (an expensive group may run
    fewer); null: all of them."""

    def __post_init__(self) -> None:
        path = section_path("experiment")
        check(bool(self.runs), f"{path}.runs", "needs at least one run")
        check(all(e >= 0 for e in self.sweep_eta), f"{path}.sweep_eta", "KL coefficients must be >= 0")
        if self.seeds is not None:
            check(bool(self.seeds), f"{path}.seeds", "must name at least one seed (null: all of the top-level seeds)")
            check(len(set(self.seeds)) == len(self.seeds), f"{path}.seeds", f"must not repeat a seed, got {self.seeds}")

    def seeds_of(self, seeds: list[int]) -> list[int]:
        """The seeds the group runs, given the top-level `seeds`."""
        return list(seeds if self.seeds is None else self.seeds)


@dataclass
class Job:
    """One (run, seed) of a group: everything a worker process needs."""

    group: str
    run: str
    seed: int
    train: TrainConfig
    task: TaskConfig
    model: str
    run_dir: str
    save_models: bool
    checkpoint_dir: str = ""
    """Where the trained agents are saved (if save_models) and the run's resume checkpoint lives; empty: run_dir."""
    fingerprint: str = ""
    """Hash of everything the run's result depends on (config, inputs, code; pipeline.train computes it): a run
    folder or checkpoint with another fingerprint belongs to an older version of the run and is never resumed."""

    @property
    def name(self) -> str:
        return f"{self.group}/{self.run}/seed{self.seed}"

    @property
    def algorithm(self) -> str:
        return "ppo" if self.train.cory.n_agents == 1 else "cory"


def eta_name(eta: float) -> str:
    return f"eta{eta:g}"


FILLED = {
    ("seed",): "the top-level `seeds` (every run is repeated over them)",
    ("prompt_template",): "the task's prompt_template (tasks.<task>.prompt_template)",
    ("cory", "observer_template"): "the task's observer_template (tasks.<task>.observer_template)",
}
"""Settings of a run's train config that come from elsewhere: no train block in params may write them."""


def _written(layer: dict, path: tuple[str, ...]) -> bool:
    for key in path[:-1]:
        layer = layer.get(key) if isinstance(layer, dict) else None
    return isinstance(layer, dict) and path[-1] in layer


def check_layer(layer: dict, where: str, sweep: bool = False, single_agent: bool = False,
                algorithm: str | None = None) -> None:
    """A train block (`train`, a group's or a run's) may not write a setting that the run would not read: one that
    FILLED or the group's sweep_eta sets per run, in a PPO run's own block a CORY setting, or a GRPO setting in a
    block whose runs' `algorithm` (given) is another one."""
    filled = dict(FILLED)
    if sweep:
        filled[("ppo", "init_kl_coef")] = "the group's sweep_eta (one run per KL coefficient)"
    for path, source in filled.items():
        if _written(layer, path):
            raise ConfigError(f"{where}.{'.'.join(path)}: set per run from {source}; remove it (one source per setting)")
    for key in (layer.get("cory") or {}) if single_agent else ():
        if key != "n_agents":
            raise ConfigError(f"{where}.cory.{key}: ignored: this run trains one agent (cory.n_agents 1); remove it")
    if algorithm not in (None, "grpo") and "grpo" in layer:
        raise ConfigError(f"{where}.grpo: ignored: train.algorithm is {algorithm} here (grpo's settings apply with "
                          "algorithm: grpo); remove it")


def expand_jobs(
    group: str, exp: ExperimentConfig, task: TaskConfig, base_train: dict, seeds: list[int], runs_dir: Path,
    checkpoints_dir: Path | None = None,
) -> list[Job]:
    """Every (run, seed) of a group with its resolved, validated TrainConfig (all checked before any training).
    Run files go to runs_dir/<group>/<run>/seed<k>/, weights to the same path under checkpoints_dir (default runs_dir).
    `seeds` are the top-level seeds; the group runs those of its own `seeds`, which must be among them.

    A run's train config is `base_train` <- the group's train block <- the run's <- its sweep KL coefficient, and then
    the settings no block may write (FILLED): its seed and its task's templates."""
    sweep = bool(exp.sweep_eta)
    extra_seeds = [s for s in exp.seeds_of(seeds) if s not in seeds]
    check(not extra_seeds, f"experiments.{group}.seeds", f"must be a subset of the top-level seeds {list(seeds)}; "
          f"{extra_seeds} are not among them")
    check_layer(base_train, "train")
    resolved = {name: merge(merge(base_train, exp.train), spec.train) for name, spec in exp.runs.items()}
    algorithms = {str(raw.get("algorithm", TrainConfig.algorithm)) for raw in resolved.values()}
    check_layer(exp.train, f"experiments.{group}.train", sweep,
                algorithm=None if "grpo" in algorithms else ", ".join(sorted(algorithms)))
    specs: dict[str, tuple[RunSpec, dict]] = {}
    for name, spec in exp.runs.items():
        n_agents = (resolved[name].get("cory") or {}).get("n_agents")
        check_layer(spec.train, f"experiments.{group}.runs.{name}.train", sweep, single_agent=n_agents == 1,
                    algorithm=str(resolved[name].get("algorithm", TrainConfig.algorithm)))
        if exp.sweep_eta:
            for eta in exp.sweep_eta:
                specs[f"{name}_{eta_name(eta)}"] = (spec, {"ppo": {"init_kl_coef": eta}})
        else:
            specs[name] = (spec, {})
    jobs = []
    for name, (spec, extra) in specs.items():
        for seed in exp.seeds_of(seeds):
            raw = merge(merge(merge(base_train, exp.train), spec.train), extra)
            raw = merge(raw, {"seed": seed, "prompt_template": task.prompt_template,
                              "cory": {"observer_template": task.observer_template}})
            train = from_dict(TrainConfig, raw, f"experiments.{group}.runs.{name}.train")
            train.cory.check_observer_template(f"tasks.{exp.task}.observer_template")
            folder = Path(group, name, f"seed{seed}")
            jobs.append(Job(group, name, seed, train, task, spec.model or task.model, str(runs_dir / folder),
                            exp.save_models, str((checkpoints_dir or runs_dir) / folder)))
    return jobs
