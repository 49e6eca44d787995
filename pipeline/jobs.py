"""The train stage's jobs: every (run, seed) of the groups it trains, with its run and checkpoint folders under the
profile's outputs, its model and reward model as folders and its prompt file as a path, each checked to be there
before any run starts (one error naming the setting otherwise), and its fingerprint: what its result depends on.

A fingerprint hashes a run's resolved train config, task and seed, the content of its base model, reward model and
prompt file, and the library code the stage runs (the `train` deps of dvc.yaml); pipeline.units plans from it which
runs are kept, resumed, trained or replaced.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cory.files import read_json
from cory.hf import is_hub_name, load_pretrained
from cory.runs.config import Job, TaskConfig
from cory.schema import ConfigError, to_dict
from pipeline.common import write_json
from pipeline.params import Params
from pipeline.paths import ROOT, out_dir
from pipeline.sections import REWARD
from pipeline.units import code_digest, content_digest, digest, model_digest


def model_path(params: Params, name: str | None) -> str | None:
    """A base_models entry (or `reward`) names the profile's model folder; anything else is a path or hub name."""
    known = set(params.base_models) | {REWARD}
    return str(out_dir(params, "models", name)) if name in known else name


def resolve(params: Params, task_name: str, task: TaskConfig) -> TaskConfig:
    """The task with its model names made folders and its prompt file made a path under the profile's outputs."""
    prompts = out_dir(params, task.prompts)
    if not prompts.is_file():
        raise FileNotFoundError(f"tasks.{task_name}.prompts: {prompts} not found (run its data stage first)")
    return replace(
        task,
        model=model_path(params, task.model),
        reward_model=model_path(params, task.reward_model),
        prompts=str(prompts),
    )


def check_prompts(jobs: list[Job]) -> None:
    """Every run's prompt file can fill its batch (checked before any run starts, not when that run's turn comes)."""
    from cory.runs.run import load_queries

    counts = {path: len(load_queries(path)[0]) for path in sorted({j.task.prompts for j in jobs})}
    for job in jobs:
        need, have = job.train.ppo.queries_per_batch, counts[job.task.prompts]
        if need > have:
            raise ConfigError(
                f"experiments.{job.group}.runs.{job.run}: needs {need} distinct queries per iteration (train.ppo."
                f"batch_size {job.train.ppo.batch_size} / samples_per_query {job.train.ppo.samples_per_query}) but "
                f"{job.task.prompts} holds only {have} prompts")


def model_setting(params: Params, job: Job) -> str:
    """The setting that names a job's model: its run's `model`, or its task's."""
    runs = params.experiments[job.group].runs
    run = job.run if job.run in runs else job.run.rsplit("_eta", 1)[0]  # a sweep's runs are <run>_eta<eta>
    if run in runs and runs[run].model is not None:
        return f"experiments.{job.group}.runs.{run}.model"
    return f"tasks.{params.experiments[job.group].task}.model"


def check_models(params: Params, jobs: list[Job]) -> None:
    """Every model and reward model a run loads is there before any run starts, one error naming its setting
    otherwise: a folder the base_models stage writes, another local folder, or a hub name that the hub (or, offline,
    the local cache) serves, found out in seconds (cory.hf.load_pretrained), not once per run."""
    named: dict[str, str] = {}
    for job in jobs:
        named.setdefault(job.model, model_setting(params, job))
        if job.task.reward_model:
            named.setdefault(job.task.reward_model, f"tasks.{params.experiments[job.group].task}.reward_model")
    for path, setting in sorted(named.items()):
        if Path(path).is_dir():
            continue
        if path.startswith(str(ROOT / "outputs")):
            raise FileNotFoundError(f"{setting}: {path}: model folder not found (the base_models stage trains it)")
        if not is_hub_name(path):
            raise FileNotFoundError(f"{setting}: {path}: no such model folder")
        import transformers  # here: only a hub name needs it, and its import is seconds of the stage's start

        load_pretrained(transformers.AutoConfig.from_pretrained, path, setting)


def check_positions(jobs: list[Job]) -> None:
    """Each run's longest response leaves room for a prompt in its model's positions, for the models in local folders
    (their config.json; validation has checked the models trained here, and run_training checks a hub model's once
    loaded)."""
    for job in jobs:
        config = Path(job.model) / "config.json"
        if not config.is_file():
            continue
        shape = read_json(config)
        positions = shape.get("max_position_embeddings") or shape.get("n_positions")
        longest = job.train.ppo.generation.response_length[1]
        if positions and longest >= positions:
            raise ConfigError(f"experiments.{job.group}.runs.{job.run}: train.ppo.generation.response_length: "
                              f"{longest} new tokens leave no room for a prompt in the {positions} positions of "
                              f"{job.model}")


def fingerprint(job: Job, code: str) -> str:
    """What a run's result depends on, hashed (see the module docstring); paths enter by content, not by name."""
    task = {k: v for k, v in to_dict(job.task).items() if k not in ("model", "reward_model", "prompts")}
    models = [job.model] + ([job.task.reward_model] if job.task.reward_model else [])
    # the models by their weights, config and tokenizer, not their training records (which hold wall-clock seconds)
    parts = {"run": job.name, "seed": job.seed, "train": to_dict(job.train), "task": task, "code": code,
             "save_models": job.save_models,
             "inputs": [model_digest(models[0]), content_digest(job.task.prompts), *map(model_digest, models[1:])]}
    return digest(parts)


def stage_jobs(params: Params, groups: list[str]) -> list[Job]:
    """The jobs of `groups` (params' resolved runs x seeds, Params.jobs) with their run and checkpoint folders under
    the profile's outputs, their model and reward model as folders and their prompt file as a path, each checked
    to be there, and their fingerprints."""
    tasks = {name: resolve(params, name, task) for name, task in params.tasks.items()
             if any(params.experiments[group].task == name for group in groups)}
    jobs = [replace(job, task=tasks[params.experiments[group].task], model=model_path(params, job.model),
                    run_dir=str(out_dir(params, job.run_dir)), checkpoint_dir=str(out_dir(params, job.checkpoint_dir)))
            for group in groups for job in params.jobs[group]]
    check_models(params, jobs)
    check_positions(jobs)
    check_prompts(jobs)
    code = code_digest("train")
    return [replace(job, fingerprint=fingerprint(job, code)) for job in jobs]


def with_final(job: Job, summary: dict, last_n: int) -> dict:
    """A kept run's summary with its final values over its last `last_n` iterations (report.last_n, capped at its
    length), recomputed from its history.csv and written back where another last_n made them: report.last_n is no
    part of a run's fingerprint, since the history it averages is the same."""
    from cory.rl.metrics import MetricsWriter

    n = min(last_n, summary["iterations"])
    if summary.get("last_n") == n:
        return summary
    summary = {**summary, "final": MetricsWriter.of_history(job.run_dir).final_values(n), "last_n": n}
    write_json(Path(job.run_dir) / "summary.json", summary)  # as MetricsWriter.summary writes it
    return summary
