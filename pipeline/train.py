"""DVC stage `train`: every (run, seed) of every experiment group, PPO and CORY alike.

    python -m pipeline.train [group ...]        # default: every group under `experiments`

Each run is its own cached unit. Its fingerprint hashes everything its result depends on: its resolved train config,
task and seed, the content of its base model, reward model and prompt file, and the library code the stage runs
(the `train` deps of dvc.yaml). DVC reruns this stage when any of its params or deps change, and the stage then
keeps every finished run whose fingerprint is unchanged, resumes a killed run from its last checkpoint
(`runtime.checkpoint_every`), trains the rest, and deletes run folders that no longer belong to any run (its outputs
are `persist: true` in dvc.yaml, so DVC leaves the finished runs in place). Changing one group's learning rate
retrains that group only; changing `runtime.workers` retrains nothing.

Runs go to outputs/<profile>/runs/<group>/<run>/seed<k>/ (histories, samples, configs: small files the report reads),
their saved weights to outputs/<profile>/checkpoints/<group>/<run>/seed<k>/ (see cory.runs); each run logs an
MLflow run.
Small models leave a GPU mostly idle, so `runtime.workers` runs share it as parallel processes, drawn from one pool
across all groups (longest first, see `start_order`) so the GPU never waits for the stragglers of one group before
the next starts.
With several GPUs visible (CUDA_VISIBLE_DEVICES, or all that torch sees), the pool has `runtime.workers` processes
per GPU, each pinned to one GPU round-robin; `runtime.executor: ray` sends the runs to a Ray cluster instead. A run
that fails stops alone: the others finish, and the stage then
fails naming every failed run (a rerun keeps the finished ones).
Every config, model and prompt file is checked before the first run starts.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path


from cory.files import mismatch, read_json
from cory.hf import is_hub_name, load_pretrained
from cory.runs.config import Job, TaskConfig
from cory.runs.run import run_training
from cory.schema import ConfigError, to_dict
from pipeline.common import device, require_device, run_stage, stage_timer, write_json
from pipeline.gpus import (DETERMINISTIC, deterministic_kernels, deterministic_torch, error_line, processes_at_once,
                           release_memory_after, run_at_once, visible_gpus)
from pipeline.params import Params, load_params
from pipeline.paths import ROOT, out_dir
from pipeline.sections import REWARD
from pipeline.single_writer import stage_lock
from pipeline.units import code_digest, content_digest, digest, model_digest, remove_stale


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


def run_all(todo: list[Job], settings: tuple, workers: int, gpus: list[str], mps: bool = False
            ) -> tuple[list[dict], dict[str, str]]:
    """Train every job, `workers` at once per GPU (in all, without one), started in `todo`'s order (start_order's),
    under a CUDA MPS daemon where `mps` asks for one and runs share a GPU; returns (summaries of the runs that
    finished, {run name: error} of those that failed). One run's failure (out of GPU memory, a non-finite loss) stops
    that run only: the others train on, and a rerun of the stage keeps them (fingerprints)."""
    failed: dict[str, str] = {}
    processes = processes_at_once(workers, gpus)
    if processes == 1:
        summaries = []
        for job in todo:
            try:
                summaries.append(run_job(job, *settings))
            except Exception as exc:  # noqa: BLE001 - reported, with every other failure, when all runs are done
                failed[job.name] = error_line(exc)
        return summaries, failed
    calls = {job.name: (run_job, (job, *settings)) for job in todo}
    return run_at_once(calls, processes, gpus, mps, "train", {job.name: float(cost(job)) for job in todo})


DETERMINISM_VARIABLES = (DETERMINISTIC, "CUBLAS_WORKSPACE_CONFIG")
"""What pipeline.gpus.deterministic_kernels sets in the stage's environment, passed on to Ray's workers."""


def on_ray_worker(function, *args):
    """A call in a Ray worker, which runs no pool initializer: torch's deterministic flags where the stage set them
    (pipeline.gpus.start_worker's part), then the call under release_memory_after."""
    deterministic_torch()
    return release_memory_after(function, *args)


def run_on_ray(todo: list[Job], settings: tuple, workers: int) -> tuple[list[dict], dict[str, str]]:
    """run_all's contract on a Ray cluster ($RAY_ADDRESS; unset: a local instance): one task per run, in `todo`'s order,
    each asking for 1/workers of a GPU where the cluster has GPUs (Ray then sets the task's CUDA_VISIBLE_DEVICES),
    else one CPU."""
    try:
        import ray
    except ImportError:
        raise ConfigError("runtime.executor: ray needs the ray package (pip install 'ray>=2.9')") from None
    ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False, log_to_driver=True,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false",
                                       **{k: os.environ[k] for k in DETERMINISM_VARIABLES if k in os.environ}}})
    try:
        has_gpu = ray.cluster_resources().get("GPU", 0) > 0
        from pipeline import train  # run_job by its importable name, not as __main__'s (python -m pipeline.train)

        # Ray's workers outlive their tasks too: each run gives back its GPU memory as it ends (release_memory_after)
        task = ray.remote(train.on_ray_worker).options(max_retries=0, **({"num_gpus": 1 / workers} if has_gpu
                                                                           else {"num_cpus": 1}))
        refs = {task.remote(train.run_job, job, *settings): job for job in todo}
        summaries, failed, pending = [], {}, list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                summaries.append(ray.get(ready[0]))
            except Exception as exc:  # noqa: BLE001 - reported with every other failure
                cause = getattr(exc, "cause", None) or exc  # a RayTaskError wraps the run's own exception
                failed[refs[ready[0]].name] = error_line(cause)
                print(f"[train] {refs[ready[0]].name} FAILED: {failed[refs[ready[0]].name]}", flush=True)
        return summaries, failed
    finally:
        ray.shutdown()


def fingerprint(job: Job, code: str) -> str:
    """What a run's result depends on, hashed (see the module docstring); paths enter by content, not by name."""
    task = {k: v for k, v in to_dict(job.task).items() if k not in ("model", "reward_model", "prompts")}
    models = [job.model] + ([job.task.reward_model] if job.task.reward_model else [])
    # the models by their weights, config and tokenizer, not their training records (which hold wall-clock seconds)
    parts = {"run": job.name, "seed": job.seed, "train": to_dict(job.train), "task": task, "code": code,
             "save_models": job.save_models,
             "inputs": [model_digest(models[0]), content_digest(job.task.prompts), *map(model_digest, models[1:])]}
    return digest(parts)


def finished_summary(job: Job) -> dict | None:
    """The summary of a finished run of this very fingerprint whose files (and saved agents, if it saves them) are
    still those it wrote (cory.runs.run records them in summary.json), else None. A damaged file is said, naming it:
    the run is trained again, and the other runs go on."""
    path = Path(job.run_dir) / "summary.json"
    if not path.is_file():
        return None
    try:
        summary = read_json(path)
    except ValueError as exc:
        print(f"[train] {job.name}: {exc}: trained again", flush=True)
        return None
    if summary.get("fingerprint") != job.fingerprint:
        return None
    records = [(job.run_dir, summary.get("files"))]
    if job.save_models:
        records.append((job.checkpoint_dir, summary.get("saved_files")))
    for folder, files in records:
        damaged = f"{path}: lists no files to check" if not files else mismatch(folder, files)
        if damaged:
            print(f"[train] {job.name}: {damaged}: trained again", flush=True)
            return None
    return summary


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


def plan(jobs: list[Job]) -> tuple[dict[str, dict], list[Job]]:
    """({name: summary} of the finished runs to keep, the jobs to run): a job resumes if its checkpoint carries its
    fingerprint; every other unfinished job starts from nothing (its old folders are deleted)."""
    from cory.rl.checkpoint import CheckpointError, checkpoint_extra

    done, todo = {}, []
    for job in jobs:
        summary = finished_summary(job)
        if summary is not None:
            done[job.name] = summary
            continue
        try:
            extra = checkpoint_extra(Path(job.checkpoint_dir) / "resume")
        except CheckpointError as exc:  # this run starts over; the others go on
            print(f"[train] {job.name}: {exc}: the run starts over", flush=True)
            extra = None
        if extra is None or extra.get("fingerprint") != job.fingerprint:
            shutil.rmtree(job.run_dir, ignore_errors=True)
            shutil.rmtree(job.checkpoint_dir, ignore_errors=True)
        todo.append(job)
    return done, todo



def run_job(
    job: Job, profile_name: str, log_every: int, checkpoint_every: int = 0, tasks: dict[str, str] | None = None,
    last_n: int = 10,
) -> dict:
    """Train one job under its MLflow run; `tasks` (group -> task name) gives the run's `task` param, `last_n`
    (report.last_n) the iterations its summary's final values are the mean of."""
    from cory.tracking.runs import start_run
    from cory.tracking.tags import run_identity

    with start_run(
        "train", to_dict(job.train), run_name=job.name, profile=profile_name, outputs=job.run_dir,
        seed=job.seed, algorithm=job.algorithm, key=job.name,
        identity=run_identity(job.name, (tasks or {}).get(job.group), job.model),
    ) as tracker:
        summary = run_training(job, device(), tracker, log_every, checkpoint_every, last_n)
    phases = ", ".join(f"{name} {seconds:.0f}" for name, seconds in summary["phase_seconds"].items())
    final = {key: float("nan") if value is None else value for key, value in summary["final"].items()}  # None: nan
    print(f"[train] {job.name}: {summary['wall_time_s']:.0f} s ({phases}), "
          f"llm1 task reward {final.get('llm1/task_reward', float('nan')):.3f}, "
          f"KL {final.get('llm1/kl', float('nan')):.2f}", flush=True)
    return summary


FINAL_METRICS = ("task_reward", "kl", "combined_reward")


def final_metrics(final: dict) -> dict:
    """A run's row of metrics/train_<group>.json: each model's final task reward, KL and combined reward (its
    summary's `final`, the mean over the last report.last_n iterations, as headline.json's)."""
    return {k: v for k, v in final.items() if k.startswith("llm") and k.split("/")[1] in FINAL_METRICS}


def model_bytes(folder: str) -> int:
    """The size of a model folder's weights (1 where it is no folder yet, e.g. a name before the stage resolves it):
    with the tokens, what a run's passes cost scales with."""
    weights = Path(folder).glob("*.safetensors") if Path(folder).is_dir() else []
    return max(1, sum(path.stat().st_size for path in weights))


def cost(job: Job) -> int:
    """A rough relative cost, to start the longest runs first: agents x iterations x the batch's new tokens x the
    model's size (a 135M model's run costs several 30M ones' at the same shape)."""
    ppo = job.train.ppo
    return (job.train.cory.n_agents * job.train.iterations * ppo.batch_size * ppo.generation.response_length[1]
            * model_bytes(job.model))


def start_order(jobs: list[Job], slots: int) -> list[Job]:
    """The order the pool starts `jobs` in: longest first (`cost`), except that at most half of the first `slots`
    (the runs that start together) compile their forward passes (`ppo.speed.compile`). Such a run spends its first minute
    compiling on its one core with the GPU idle; when every slot did that at once (the default profile's 12 math runs)
    the GPU idled for the train stage's first 75 s. The other half trains meanwhile, and the compiled runs it displaced
    start as slots free up, with inductor's caches warm from the first ones."""
    def compiles(job: Job) -> bool:
        return bool(job.train.ppo.speed.compile)

    first, later = [], []
    for job in sorted(jobs, key=cost, reverse=True):
        room = len(first) < slots and not (compiles(job) and sum(map(compiles, first)) >= max(1, slots // 2))
        (first if room else later).append(job)
    return first + later


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
    runtime, last_n = params.runtime, params.report.last_n
    tasks = {group: params.experiments[group].task for group in groups}  # group -> task name: its runs' MLflow param
    jobs = stage_jobs(params, groups)
    runs_root, checkpoints_root = out_dir(params, "runs"), out_dir(params, "checkpoints")
    checkpoints_root.mkdir(parents=True, exist_ok=True)  # a DVC output even when no group saves weights
    # Every group's folder is ours when the stage runs them all: a group gone from params goes from the outputs too.
    owned = groups if not owns_all else sorted({p.name for root in (runs_root, checkpoints_root) for p in root.glob("*")})
    stale = remove_stale(runs_root, jobs, owned, "run_dir") + remove_stale(checkpoints_root, jobs, owned, "checkpoint_dir")
    done, todo = plan(jobs)
    by_name = {job.name: job for job in jobs}  # a kept run's final values follow report.last_n
    done = {name: with_final(by_name[name], summary, last_n) for name, summary in done.items()}
    resuming = sum((Path(j.checkpoint_dir) / "resume").is_dir() for j in todo)
    print(f"[train] {len(jobs)} runs: {len(done)} finished with the same fingerprint (kept), {resuming} to resume, "
          f"{len(todo) - resuming} to train; {len(set(stale))} stale run folders removed", flush=True)

    name = params.profile
    # Many processes share one GPU: let each one's allocator grow and shrink in place rather than hold fragmented
    # blocks (set before any worker starts CUDA; an explicit setting of the user's wins).
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    with stage_timer(params, "train"):
        settings = (name, runtime.log_every, runtime.checkpoint_every, tasks, last_n)
        gpus = visible_gpus() if device() == "cuda" else []
        processes = processes_at_once(runtime.workers, gpus)
        todo = start_order(todo, processes)
        if len(gpus) > 1:
            print(f"[train] {len(gpus)} GPUs: {runtime.workers} runs at once on each", flush=True)
        if runtime.executor == "ray":
            summaries, failed = run_on_ray(todo, settings, runtime.workers)
        else:
            if todo and processes > 1:  # processes at once
                from cory.tracking.store import open_store, store_exists

                if not store_exists():  # a new store: created here, before the processes that log to it start at once
                    open_store(name)
            summaries, failed = run_all(todo, settings, runtime.workers, gpus, runtime.mps)
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(todo)} runs failed (the {len(summaries)} others finished and are "
                               "kept; rerun the stage to train the failed ones):\n"
                               + "\n".join(f"  {run}: {error}" for run, error in sorted(failed.items())))
    summaries += list(done.values())
    for group in groups:
        rows = {s["run"]: final_metrics(s["final"]) for s in summaries if s["run"].startswith(f"{group}/")}
        write_json(out_dir(params, "metrics", f"train_{group}.json"), rows)


if __name__ == "__main__":
    run_stage(lambda: main(sys.argv[1:]))
