"""DVC stage `train`: every (run, seed) of every experiment group, PPO and CORY alike.

    python -m pipeline.train [group ...]        # default: every group under `experiments`

Runs go to outputs/<profile>/runs/<group>/<run>/seed<k>/ (histories, samples, configs: small files the report reads),
their saved weights to outputs/<profile>/checkpoints/<group>/<run>/seed<k>/ (see cory.experiments); each run logs an
MLflow run.
Small models leave a GPU mostly idle, so `runtime.workers` runs share it as parallel processes, drawn from one pool
across all groups (longest first) so the GPU never waits for the stragglers of one group before the next starts.
Every config, model and prompt file is checked before the first run starts.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from cory.config import check, section_path, to_dict
from cory.experiments import Job, TaskConfig, expand_jobs, parse_experiment, run_training
from pipeline.common import ROOT, device, load_params, out_dir, profile, run_stage, section, seeds, stage_timer, write_json


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


def model_path(params: dict, name: str | None) -> str | None:
    """A base_models entry (or `reward`) names the profile's model folder; anything else is a path or hub name."""
    known = set(params.get("base_models") or {}) | {"reward"}
    return str(out_dir(params, "models", name)) if name in known else name


def resolve(params: dict, task_name: str, task: TaskConfig) -> TaskConfig:
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


def check_models(jobs: list[Job]) -> None:
    for path in sorted({j.model for j in jobs} | {j.task.reward_model for j in jobs if j.task.reward_model}):
        if path.startswith(str(ROOT)) and not Path(path).is_dir():
            raise FileNotFoundError(f"{path}: model folder not found (run the base_models / reward_model stage)")


def share_cpus(workers: int) -> None:
    """In each of `workers` processes sharing one machine: an equal share of the cores for torch's CPU thread pool,
    and no thread pool in the tokenizer (as torchrun sets OMP_NUM_THREADS=1), so that 14 processes do not run 14 x 16
    threads on 16 cores. Called in every worker before it does any work."""
    import torch

    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def run_job(job: Job, profile_name: str, log_every: int) -> dict:
    from cory.tracking import start_run

    with start_run(
        "train", to_dict(job.train), run_name=job.name, profile=profile_name, outputs=job.run_dir,
        seed=job.seed, algorithm=job.algorithm, tags={"group": job.group, "run": job.run},
    ) as tracker:
        summary = run_training(job, device(), tracker, log_every)
    print(f"[train] {job.name}: {summary['wall_time_s']:.0f} s, "
          f"llm1 task reward {summary['final'].get('llm1/task_reward', float('nan')):.3f}, "
          f"KL {summary['final'].get('llm1/kl', float('nan')):.2f}", flush=True)
    return summary


HEADLINE = ("task_reward", "kl", "combined_reward")


def headline(final: dict) -> dict:
    """The DVC metrics of a run: each model's final task reward, KL and combined reward."""
    return {k: v for k, v in final.items() if k.startswith("llm") and k.split("/")[1] in HEADLINE}


def cost(job: Job) -> int:
    """A rough relative cost, to start the longest runs first."""
    return job.train.cory.n_agents * job.train.iterations * job.train.ppo.generation.response_length[1]


def main(argv: list[str]) -> None:
    params = load_params()
    runtime = section(params, "runtime", RuntimeConfig)
    groups = argv or list(params.get("experiments") or {})
    jobs: list[Job] = []
    for group in groups:
        exp, task = parse_experiment(params, group)
        task = resolve(params, exp.task, task)
        group_jobs = expand_jobs(group, exp, task, params.get("train") or {}, seeds(params),
                                 out_dir(params, "runs"), out_dir(params, "checkpoints"))
        jobs += [replace(job, model=model_path(params, job.model)) for job in group_jobs]
    check_models(jobs)
    jobs.sort(key=cost, reverse=True)
    out_dir(params, "checkpoints").mkdir(parents=True, exist_ok=True)  # a DVC output even when no group saves weights

    name = profile(params)
    # Many processes share one GPU: let each one's allocator grow and shrink in place rather than hold fragmented
    # blocks (set before any worker starts CUDA; an explicit setting of the user's wins).
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    with stage_timer(params, "train"):
        if runtime.workers == 1:
            summaries = [run_job(job, name, runtime.log_every) for job in jobs]
        else:
            # spawn: CUDA cannot be used in forked children.
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(runtime.workers, mp_context=context, initializer=share_cpus,
                                     initargs=(runtime.workers,)) as pool:
                summaries = list(pool.map(run_job, jobs, [name] * len(jobs), [runtime.log_every] * len(jobs)))
    for group in groups:
        rows = {s["run"]: headline(s["final"]) for s in summaries if s["run"].startswith(f"{group}/")}
        write_json(out_dir(params, "metrics", f"train_{group}.json"), rows)


if __name__ == "__main__":
    run_stage(lambda: main(sys.argv[1:]))
