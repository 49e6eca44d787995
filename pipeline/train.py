"""DVC stage `train@<group>`: every (run, seed) of one experiment group, PPO and CORY alike.

    python -m pipeline.train imdb

Runs go to outputs/<profile>/runs/<group>/<run>/seed<k>/ (see cory.experiments) and each logs an MLflow run.
Small models leave a GPU mostly idle, so `runtime.workers` runs share it as parallel processes; every config, model
and prompt file is checked before the first run starts.
"""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from cory.config import ConfigError, check, section_path, to_dict
from cory.experiments import Job, TaskConfig, expand_jobs, parse_experiment, run_training
from pipeline.common import ROOT, device, load_params, out_dir, profile, section, write_json


@dataclass
class RuntimeConfig:
    """How stages use the machine."""

    workers: int = 1
    """Training runs executed at once (parallel processes sharing the GPU); 1 runs them one after another."""
    log_every: int = 1
    """Send metrics to MLflow every this many iterations (the history.csv always has every iteration)."""

    def __post_init__(self) -> None:
        path = section_path("runtime")
        check(self.workers >= 1, f"{path}.workers", f"must be >= 1, got {self.workers}")
        check(self.log_every >= 1, f"{path}.log_every", f"must be >= 1, got {self.log_every}")


def resolve(params: dict, task_name: str, task: TaskConfig) -> TaskConfig:
    """Model names that are base_models entries (or `reward`) become the profile's model folders; file paths in
    a task are relative to the profile's outputs folder."""
    models = out_dir(params, "models")
    known = set(params.get("base_models") or {}) | {"reward"}

    def model(name: str | None) -> str | None:
        return str(models / name) if name in known else name

    prompts = out_dir(params, task.prompts)
    if not prompts.is_file():
        raise FileNotFoundError(f"tasks.{task_name}.prompts: {prompts} not found (run its data stage first)")
    return replace(task, model=model(task.model), reward_model=model(task.reward_model), prompts=str(prompts))


def check_models(jobs: list[Job]) -> None:
    for path in sorted({j.model for j in jobs} | {j.task.reward_model for j in jobs if j.task.reward_model}):
        if path.startswith(str(ROOT)) and not Path(path).is_dir():
            raise FileNotFoundError(f"{path}: model folder not found (run the base_models / reward_model stage)")


def run_job(job: Job, profile_name: str, log_every: int) -> dict:
    from cory.tracking import start_run

    with start_run(
        f"train@{job.group}", to_dict(job.train), run_name=job.name, profile=profile_name, outputs=job.run_dir,
        seed=job.seed, algorithm=job.algorithm, tags={"group": job.group, "run": job.run},
    ) as tracker:
        summary = run_training(job, device(), tracker, log_every)
    print(f"[train] {job.name}: {summary['wall_time_s']:.0f} s, "
          f"llm1 task reward {summary['final'].get('llm1/task_reward', float('nan')):.3f}, "
          f"KL {summary['final'].get('llm1/kl', float('nan')):.2f}", flush=True)
    return summary


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m pipeline.train <experiment group>")
    group = argv[0]
    params = load_params()
    runtime = section(params, "runtime", RuntimeConfig)
    exp, task = parse_experiment(params, group)
    task = resolve(params, exp.task, task)
    seeds = params.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"seeds: must be a non-empty list of integers, got {seeds!r}")
    jobs = expand_jobs(group, exp, task, params.get("train") or {}, seeds, out_dir(params, "runs"))
    check_models(jobs)

    name = profile(params)
    if runtime.workers == 1:
        summaries = [run_job(job, name, runtime.log_every) for job in jobs]
    else:
        # spawn: CUDA cannot be used in forked children.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(runtime.workers, mp_context=context) as pool:
            summaries = list(pool.map(run_job, jobs, [name] * len(jobs), [runtime.log_every] * len(jobs)))
    write_json(ROOT / "metrics" / name / f"train_{group}.json", {s["run"]: s["final"] for s in summaries})


if __name__ == "__main__":
    main(sys.argv[1:])
