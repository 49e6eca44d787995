"""The params tree: one typed schema, checked as a whole before any stage runs (`python -m pipeline.params`).

`Params` is the schema of params.yaml: each top-level key is a typed section (a dataclass whose fields document the
settings; the library's sections are in cory.rl.config, cory.tasks.config, cory.runs.config and cory.report.config), built by
`cory.schema.from_dict`, so an unknown key, a wrong type or an impossible value is one ConfigError naming the
setting by its dotted path. `validate` then checks what no single section can: names that refer to other entries
(base models, tasks, runs), lengths against model sizes, every run x seed of every experiment group resolved, the
model folders pass@k evaluates, and the runs and models the report reads. It imports no stage module and no torch,
so it is quick and has no side effects; every stage calls it first: `load_params()` returns the typed tree, and
the stages read their settings from it (with the settings FILLED from elsewhere in place, and every run x seed of
every group resolved once, `Params.jobs`).

One source per setting: a setting that is filled from somewhere else may not be written in params. The train block
of a run gets its `seed` from `seeds` and its templates from its task (cory.runs.config.expand_jobs rejects them in
any train block); the sections below get the settings of FILLED, and writing one is an error naming it and its
source, where it used to be silently replaced or ignored. Reading the file (strict YAML, $CORY_PARAMS, whether it
changed while a stage ran) is pipeline.params_files'.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from cory.report.config import ReportConfig
from cory.report.results import EXPECTED_RUNS, check_imdb_group, check_mechanism, check_report_inputs, sweep_groups
from cory.rl.config import TrainConfig
from cory.runs.config import ExperimentConfig, Job, TaskConfig, expand_jobs
from cory.schema import ConfigError, check, from_dict, merge
# read_yaml, params_path and StrictLoader are imported from here by pipeline.profile, pipeline.report and tools/
from pipeline.params_files import StrictLoader, params_path, read_yaml, remember  # noqa: F401
from pipeline.paths import ROOT, check_profile, shown
from pipeline.sections import (
    CHECKPOINT, REWARD, SCRATCH, BaseModelConfig, DataConfig, EvaluateConfig, RewardModelConfig, RuntimeConfig,
    check_sources,
)
from pipeline.sizes import check_sizes


PROFILES = ROOT / "profiles"


DEVIATIONS = PROFILES / "deviations.yaml"
"""Why each profile's settings differ from the paper's: prose, so kept out of params (report.deviations)."""


EVAL_TASK = "math"
"""The task whose test problems and prompt pass@k uses (the evaluate stage reads data/math/test.jsonl)."""



def load_params(path: str | os.PathLike | None = None) -> Params:
    """The typed params tree of `params_path(path)`, validated as a whole, so a typo anywhere stops every stage
    before it starts.

    params.yaml is a working copy: `python -m pipeline.profile NAME` writes it from profiles/, and it may be edited
    (by hand or by `dvc exp run -S key=value`) like any params file; only its content is checked."""
    path = params_path(path)
    if not path.is_file():
        raise ConfigError(f"{shown(path)}: params file not found")
    remember(path)  # the stage fails if it changes before it ends (pipeline.common.run_stage)
    params = read_yaml(path)
    if not isinstance(params, dict):
        raise ConfigError(f"{shown(path)}: must hold a mapping of settings, got {type(params).__name__}")
    try:
        return validate(params)
    except ConfigError as exc:
        raise ConfigError(f"{shown(path)}: {exc}") from None


@dataclass
class Params:
    """params.yaml: every setting of the pipeline, one typed section per top-level key."""

    profile: str
    """The profile the settings came from (`python -m pipeline.profile NAME`); every output path contains it."""
    seeds: list[int]
    """Training seeds: every RL run is repeated over them, and pass@k evaluates each seed's models."""
    runtime: RuntimeConfig
    data: DataConfig
    base_models: dict[str, BaseModelConfig]
    """Base language models by name; trained by the DVC stage base_models (an MLflow run base_model@<name> each)."""
    reward_model: RewardModelConfig
    train: TrainConfig
    """The train block every RL run reads; experiment groups and their runs override parts of it."""
    tasks: dict[str, TaskConfig]
    """RL tasks by name: base model, prompts, reward, templates."""
    experiments: dict[str, ExperimentConfig]
    """Experiment groups by name: runs x seeds of one task (the train stage's units)."""
    evaluation: EvaluateConfig
    report: ReportConfig
    jobs: dict[str, list[Job]] = field(default_factory=dict, init=False, repr=False)
    """Every (run, seed) of every experiment group, resolved and validated once (`validate`): run folders relative to
    outputs/<profile>/ (runs/..., checkpoints/...), task and model by the names params give them."""

    def __post_init__(self) -> None:
        check_profile(self.profile)
        check_seeds(self.seeds)


def check_seeds(value: Any) -> list[int]:
    ok = isinstance(value, list) and value and all(isinstance(s, int) and not isinstance(s, bool) for s in value)
    check(bool(ok), "seeds", f"must be a non-empty list of integers, got {value!r}")
    check(len(set(value)) == len(value), "seeds", f"must not repeat a seed, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------------------------------
# Settings filled from elsewhere
# --------------------------------------------------------------------------------------------------------------------

FILLED = {
    "evaluation.prompt_template": f"tasks.{EVAL_TASK}.prompt_template",
    "report.deviations": "profiles/deviations.yaml",
}
"""Section setting -> where its value comes from. Params may not write these: a second copy could only drift."""


def deviations(profile: str, path: Path = DEVIATIONS) -> dict[str, str]:
    """The profile's entry of profiles/deviations.yaml (setting -> why it differs from the paper's), {} if none."""
    if path.is_file():
        remember(path)
    content = read_yaml(path) if path.is_file() else {}
    where = shown(path)
    check(isinstance(content, dict), where, "must map profile names to {setting: why}")
    for name in content:
        check(name != path.stem and (path.parent / f"{name}.yaml").is_file(), f"{where}: {name}",
              "no such profile in profiles/")
    entry = content.get(profile) or {}
    check(isinstance(entry, dict) and all(isinstance(v, str) for v in entry.values()), f"{where}: {profile}",
          "must map settings to the text that explains them")
    return {str(k): v for k, v in entry.items()}


def filled(params: dict, section: str) -> dict[str, Any]:
    """The FILLED settings of one top-level section, from their sources."""
    if section == "evaluation":
        task = (params.get("tasks") or {}).get(EVAL_TASK)
        check(isinstance(task, dict), f"tasks.{EVAL_TASK}",
              "missing: evaluation takes its prompt_template (and test problems) from this task")
        return {"prompt_template": task.get("prompt_template", TaskConfig.prompt_template)}
    if section == "report":
        return {"deviations": deviations(check_profile(params.get("profile")))}
    return {}


def with_filled(params: dict) -> dict:
    """params with every FILLED setting in place; an error if params write one themselves."""
    for dotted, source in FILLED.items():
        section, key = dotted.split(".")
        if isinstance(params.get(section), dict) and key in params[section]:
            raise ConfigError(f"{dotted}: comes from {source}; remove it from the params (one source per setting)")
    return {key: merge(value, filled(params, key)) if isinstance(value, dict) else value
            for key, value in params.items()}


# --------------------------------------------------------------------------------------------------------------------
# Checks across sections
# --------------------------------------------------------------------------------------------------------------------

def check_base_model_name(name: Any, key: str, tree: Params) -> None:
    check(name in tree.base_models, key, f"no base model {name!r} (known: {', '.join(tree.base_models)})")


def check_length(tokens: int, n_positions: int, key: str, limit: str) -> None:
    check(tokens <= n_positions, key, f"{tokens} tokens exceed the model's {limit} = {n_positions}")


def check_models(tree: Params) -> None:
    """Base models and the reward model: references by name and lengths (the settings their source does not read:
    check_sources, before the sections are built)."""
    for name, cfg in tree.base_models.items():
        where = f"base_models.{name}"
        check(name != REWARD, where, f"{REWARD!r} is the reward model's name (its folder models/{REWARD}): "
              "name the base model otherwise")
        if cfg.compare_params_with is not None:
            check_base_model_name(cfg.compare_params_with, f"{where}.compare_params_with", tree)
        if cfg.source == SCRATCH:  # pretrain_lm checks this too, but once the corpus is read
            check_length(cfg.pretrain.seq_len, cfg.lm.n_positions, f"{where}.pretrain.seq_len", f"{where}.lm.n_positions")
    rm = tree.reward_model
    if rm.source != SCRATCH:
        return
    if rm.init_from is None:  # a classifier of shape classifier.lm from random init
        lm, where = rm.classifier.lm, "reward_model.classifier.lm"
    else:
        check_base_model_name(rm.init_from, "reward_model.init_from", tree)
        body = tree.base_models[rm.init_from]
        if body.source != SCRATCH:
            return  # a hub model's n_positions is known once it is loaded
        lm, where = body.lm, f"base_models.{rm.init_from}.lm"
    check_length(rm.classifier.max_length, lm.n_positions, "reward_model.classifier.max_length", f"{where}.n_positions")


def check_tasks(tree: Params, raw: dict) -> None:
    """Each task's reward settings, with the lengths the profile's own classifier reads filled from the settings it
    was trained (or evaluated) with: a text the classifier cannot read whole is cut as in its training."""
    classifier = tree.reward_model.classifier
    for name, task in tree.tasks.items():
        where = f"tasks.{name}"
        check(task.reward == "sentiment" or task.reward_model is None, f"{where}.reward_model",
              f"ignored: the {task.reward!r} reward reads no model; remove it")
        if task.reward_model == REWARD:
            for key in ("max_length", "truncation"):
                check(f"reward_{key}" not in raw["tasks"][name], f"{where}.reward_{key}",
                      f"comes from reward_model.classifier.{key}; remove it (one source per setting)")
            tree.tasks[name] = replace(task, reward_max_length=classifier.max_length,
                                       reward_truncation=classifier.truncation)
    check(EVAL_TASK in tree.tasks and tree.tasks[EVAL_TASK].reward == "math", f"tasks.{EVAL_TASK}",
          "pass@k evaluation needs a task of this name with reward: math")


def check_experiments(tree: Params, raw: dict) -> dict[str, list]:
    """Every run x seed of every group, resolved and validated (cory.runs.config.expand_jobs); returns group -> jobs.

    A group's train block is checked on its own first, so that an error in it names the key where it is written;
    each run's config is built once, by expand_jobs (its errors name the run)."""
    jobs = {}
    for group, exp in tree.experiments.items():
        check(exp.task in tree.tasks, f"experiments.{group}.task",
              f"unknown task {exp.task!r} (known: {', '.join(tree.tasks)})")
        from_dict(TrainConfig, merge(raw["train"], exp.train), f"experiments.{group}.train")
        jobs[group] = expand_jobs(group, exp, tree.tasks[exp.task], raw["train"], tree.seeds, Path("runs"),
                                  Path("checkpoints"))
    return jobs


def check_evaluation(tree: Params, jobs: dict[str, list]) -> None:
    """Each relative model folder of `evaluation.models` is one the pipeline writes: a base model or the saved agent
    of a run of the math task; the authors' GSM8K protocol only where the test problems are GSM8K's."""
    source = tree.data.math.source
    check(not tree.evaluation.authors_protocol.enabled or source == "gsm8k", "evaluation.authors_protocol.enabled",
          f"the authors' protocol is GSM8K's (their prompt, sampler and parsing, to set beside the paper's Fig. 5), "
          f"but data.math.source is {source!r}: its numbers would compare with nothing, at sum(ks) samples of "
          f"max_new_tokens tokens per problem and model; set it false, or data.math.source to gsm8k")
    for name, folder in tree.evaluation.models.items():
        where = f"evaluation.models.{name}"
        if Path(folder).is_absolute():
            continue
        if folder.startswith("models/"):
            check_base_model_name(folder.removeprefix("models/"), where, tree)
            continue
        match = CHECKPOINT.fullmatch(folder)
        check(match is not None, where, f"{folder!r} is no folder the pipeline writes: models/<base model> or "
              "checkpoints/<group>/<run>/seed{seed}/<llm1|llm2> (or give an absolute path)")
        group, run, agent = match["group"], match["run"], int(match["agent"])
        check(group in tree.experiments, where, f"no experiment group {group!r} (known: {', '.join(tree.experiments)})")
        runs = {job.run: job for job in jobs[group]}
        check(run in runs, where, f"group {group!r} has no run {run!r} (it has {', '.join(runs)})")
        check(tree.experiments[group].save_models, where, f"experiments.{group}.save_models is false: no weights")
        check(agent <= runs[run].train.cory.n_agents, where, f"run {group}/{run} trains {runs[run].train.cory.n_agents} "
              f"agent(s), so it has no llm{agent}")
        trained = tree.experiments[group].seeds_of(tree.seeds)
        evaluated = evaluation_seeds(tree)
        check(set(trained) == set(evaluated), where,
              f"pass@k evaluates the seeds {evaluated} of the first group evaluation.models names, but group "
              f"{group!r} trains {trained} (experiments.{group}.seeds)")
        task = tree.experiments[group].task
        check(task == EVAL_TASK, where, f"group {group!r} trains task {task!r}; pass@k asks the {EVAL_TASK} task's "
              "test problems in its prompt")


def evaluation_seeds(tree: Params) -> list[int]:
    """The seeds pass@k substitutes for "{seed}" in evaluation.models: those of the experiment group the first
    checkpoint folder names (validation checks that every named group trains them), else the top-level `seeds`."""
    for folder in tree.evaluation.models.values():
        match = CHECKPOINT.fullmatch(folder)
        if match and match["group"] in tree.experiments:
            return tree.experiments[match["group"]].seeds_of(tree.seeds)
    return list(tree.seeds)


def check_report_settings(tree: Params, jobs: dict[str, list]) -> None:
    """report.imdb_groups names IMDB groups with the runs their claims read, and where the report tests claims
    (report.test_claims), every group the claims read runs at least report.min_seeds seeds: with fewer, no interval
    over seeds can decide a claim. Params without the report's groups are not checked (see check_report_inputs)."""
    report = tree.report
    if not any(group in jobs for group in EXPECTED_RUNS):
        return
    for group in report.imdb_groups:
        check(group in tree.experiments, "report.imdb_groups",
              f"no experiment group {group!r} (known: {', '.join(tree.experiments)})")
        exp = tree.experiments[group]
        reward = tree.tasks[exp.task].reward
        check(reward == "sentiment" and not exp.sweep_eta, "report.imdb_groups",
              f"group {group!r} is no IMDB group: it trains task {exp.task!r} (reward {reward!r})"
              + (" and sweeps the KL coefficient (sweep_eta)" if exp.sweep_eta else ""))
        check_imdb_group(group, jobs[group])
    check_mechanism(report.mechanism, jobs, report.test_claims)  # the headline's decision rule: its runs, KL coefficients and seeds
    if not report.test_claims:
        return
    rule = (report.mechanism.group,) if report.mechanism else ()
    for group in dict.fromkeys((*report.imdb_groups, *rule, "math", *sweep_groups(tree.experiments).values())):
        exp = tree.experiments[group]
        seeds = exp.seeds_of(tree.seeds)
        check(len(seeds) >= report.min_seeds, f"experiments.{group}.seeds" if exp.seeds is not None else "seeds",
              f"group {group!r} runs {len(seeds)} seed(s) {seeds}, and the report's claims read it: an interval over "
              f"seeds needs at least report.min_seeds = {report.min_seeds} (or set report.test_claims: false to "
              "report the numbers without verdicts)")


def validate(params: dict) -> Params:
    """The typed tree; one ConfigError naming the first wrong setting if any."""
    if not isinstance(params, dict):
        raise ConfigError(f"params: must be a mapping of settings, got {type(params).__name__}")
    sections = [f.name for f in fields(Params) if f.init]
    for key in params:
        check(key in sections, str(key), f"unknown top-level setting (known: {', '.join(sections)})")
    for key in sections:
        check(key in params, key, "section missing from params.yaml")
    raw = with_filled(params)
    check_sources(raw)
    tree = from_dict(Params, raw)
    check_models(tree)
    check_tasks(tree, raw)
    jobs = check_experiments(tree, raw)
    check_evaluation(tree, jobs)
    check_report_inputs(jobs, tree.evaluation.models, tree.experiments)
    check_report_settings(tree, jobs)
    check_sizes(tree, raw, jobs)
    tree.jobs = jobs
    return tree


def main() -> None:
    """`python -m pipeline.params`, and the `params` stage of dvc.yaml."""
    load_params()  # validates (run_stage adds what a failed `dvc exp run` left in params.yaml)
    print("params.yaml: every setting is valid")


if __name__ == "__main__":
    from pipeline import params  # by its importable name: the schema's annotations resolve in that module's globals
    from pipeline.common import run_stage

    run_stage(params.main)
