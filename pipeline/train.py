"""DVC stage `train`: every (run, seed) of every experiment group, PPO and CORY alike.

    python -m pipeline.train [group ...]        # default: every group under `experiments`

Each run is its own cached unit, with a fingerprint of everything its result depends on (pipeline.jobs). DVC reruns
this stage when any of its params or deps change, and the stage then keeps every finished run whose fingerprint is
unchanged, resumes a killed run from its last checkpoint (`runtime.checkpoint_every`), trains the rest, and deletes
run folders that no longer belong to any run (its outputs are `persist: true` in dvc.yaml, so DVC leaves the finished
runs in place). A run whose settings changed is trained beside its older version, which stays until the new one has
finished (pipeline.units.plan): an interrupted experiment loses none of the runs it had. Changing one group's
learning rate retrains that group only; changing `runtime.workers` retrains nothing.

Runs go to outputs/<profile>/runs/<group>/<run>/seed<k>/ (histories, samples, configs: small files the report reads),
their saved weights to outputs/<profile>/checkpoints/<group>/<run>/seed<k>/ (see cory.runs); each run logs an
MLflow run. Small models leave a GPU mostly idle, so runs share it as parallel processes, drawn from one pool across
all groups (longest first), as many at once as their peak GPU memory fits, at most `runtime.workers` per GPU
(pipeline.schedule); `runtime.executor: ray` sends them to a Ray cluster instead. A run that fails (a non-finite
loss, out of GPU memory alone, a CUDA error, its worker process killed) stops alone, named in one line with its
iteration and phase: the others finish, and the stage then fails naming every failed run (a rerun keeps the finished
ones and resumes the failed ones from their checkpoints). Every config, model and prompt file is checked before the
first run starts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cory.runs.config import Job
from cory.runs.run import run_training
from cory.schema import ConfigError, to_dict
from pipeline.common import UnitsFailed, device, require_device, run_stage, stage_timer, write_json
from pipeline.gpus import deterministic_kernels, processes_at_once, visible_gpus
from pipeline.jobs import stage_jobs, with_final
from pipeline.params import Params, load_params
from pipeline.paths import out_dir
from pipeline.schedule import Needs, measured_peaks, run_all, run_on_ray, start_order
from pipeline.single_writer import stage_lock
from pipeline.units import plan, promote, remove_stale


def main(argv: list[str]) -> None:
    params = load_params()
    require_device(params)
    deterministic_kernels(params.runtime.deterministic)
    groups = argv or list(params.experiments)
    unknown = [group for group in groups if group not in params.experiments]
    if unknown:
        raise ConfigError(f"experiments.{unknown[0]}: no such experiment group "
                          f"(known: {', '.join(params.experiments)})")
    with stage_lock(params, "train"):  # one writer of the profile's outputs (pipeline.single_writer)
        train_groups(params, groups, owns_all=not argv)


def train_groups(params: Params, groups: list[str], owns_all: bool) -> None:
    """The stage's work on `groups` (`owns_all`: every group of params, whose folders are then all the stage's)."""
    from cory.rl.checkpoint import checkpoint_extra

    runtime, last_n = params.runtime, params.report.last_n
    tasks = {group: params.experiments[group].task for group in groups}  # group -> task name: its runs' MLflow param
    jobs = stage_jobs(params, groups)
    runs_root, checkpoints_root = out_dir(params, "runs"), out_dir(params, "checkpoints")
    checkpoints_root.mkdir(parents=True, exist_ok=True)  # a DVC output even when no group saves weights
    # Every group's folder is ours when the stage runs them all: a group gone from params goes from the outputs too.
    owned = groups if not owns_all else sorted({p.name for root in (runs_root, checkpoints_root) for p in root.glob("*")})
    stale = remove_stale(runs_root, jobs, owned, "run_dir") + remove_stale(checkpoints_root, jobs, owned, "checkpoint_dir")
    peaks = measured_peaks(jobs)  # before the plan: a run it trains again measured its kind's memory last time
    done, todo, replacing = plan(jobs, checkpoint_extra)
    by_name = {job.name: job for job in jobs}  # a kept run's final values follow report.last_n
    done = {name: with_final(by_name[name], summary, last_n) for name, summary in done.items()}
    resuming = sum((Path(j.checkpoint_dir) / "resume").is_dir() for j in todo)
    print(f"[train] {len(jobs)} runs: {len(done)} finished with the same fingerprint (kept), {resuming} to resume, "
          f"{len(todo) - resuming} to train; {len(set(stale))} stale run folders removed", flush=True)
    if replacing:
        print(f"[train] {replacing} of them replace an older version of their run, which stays in place until the "
              "new one has finished", flush=True)

    # Many processes share one GPU: let each one's allocator grow and shrink in place rather than hold fragmented
    # blocks (set before any worker starts CUDA; an explicit setting of the user's wins).
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    with stage_timer(params, "train"):
        settings = (params.profile, runtime.log_every, runtime.checkpoint_every, tasks, last_n)
        gpus = visible_gpus() if device() == "cuda" else []
        todo = start_order(todo, processes_at_once(runtime.workers, gpus))
        if len(gpus) > 1:
            print(f"[train] {len(gpus)} GPUs: at most {runtime.workers} runs at once on each", flush=True)
        if runtime.executor == "ray":
            summaries, failed = run_on_ray(run_job, todo, settings, runtime.workers)
        else:
            if todo and (gpus or runtime.workers > 1):  # processes at once
                from cory.tracking.store import open_store, store_exists

                if not store_exists():  # a new store: created here, before the processes that log to it start at once
                    open_store(params.profile)
            needs = Needs(todo, peaks) if gpus else None
            summaries, failed = run_all(run_job, todo, settings, runtime.workers, gpus, runtime.mps, needs)
        if failed:
            raise UnitsFailed(f"{len(failed)} of {len(todo)} runs failed (the {len(summaries)} others finished and are "
                               "kept; rerun the stage to train the failed ones, from their checkpoints):\n"
                               + "\n".join(f"  {run}: {error}" for run, error in sorted(failed.items())))
    summaries += list(done.values())
    finals = out_dir(params, "metrics", "train")  # one file a group: the groups differ between profiles
    if owns_all:  # a group gone from params goes from the folder too
        for path in finals.glob("*.json"):
            if path.stem not in params.experiments:
                path.unlink()
    for group in groups:
        rows = {s["run"]: final_metrics(s["final"]) for s in summaries if s["run"].startswith(f"{group}/")}
        write_json(finals / f"{group}.json", rows)


def run_job(
    job: Job, profile_name: str, log_every: int, checkpoint_every: int = 0, tasks: dict[str, str] | None = None,
    last_n: int = 10,
) -> dict:
    """Train one job under its MLflow run, and put it in its older version's place if it was trained beside one
    (pipeline.units.promote); `tasks` (group -> task name) gives the run's `task` param, `last_n` (report.last_n) the
    iterations its summary's final values are the mean of."""
    from cory.tracking.runs import start_run
    from cory.tracking.tags import run_identity

    with start_run(
        "train", to_dict(job.train), run_name=job.name, profile=profile_name, outputs=job.run_dir,
        seed=job.seed, algorithm=job.algorithm, key=job.name,
        identity=run_identity(job.name, (tasks or {}).get(job.group), job.model),
    ) as tracker:
        summary = run_training(job, device(), tracker, log_every, checkpoint_every, last_n)
    promote(job)
    phases = ", ".join(f"{name} {seconds:.0f}" for name, seconds in summary["phase_seconds"].items())
    final = {key: float("nan") if value is None else value for key, value in summary["final"].items()}  # None: nan
    print(f"[train] {job.name}: {summary['wall_time_s']:.0f} s ({phases}), "
          f"llm1 task reward {final.get('llm1/task_reward', float('nan')):.3f}, "
          f"KL {final.get('llm1/kl', float('nan')):.2f}", flush=True)
    return summary


FINAL_METRICS = ("task_reward", "kl", "combined_reward")


def final_metrics(final: dict) -> dict:
    """A run's row of metrics/train/<group>.json: each model's final task reward, KL and combined reward (its
    summary's `final`, the mean over the last report.last_n iterations, as headline.json's)."""
    return {k: v for k, v in final.items() if k.startswith("llm") and k.split("/")[1] in FINAL_METRICS}


if __name__ == "__main__":
    run_stage(lambda: main(sys.argv[1:]))
