"""When and where the train stage's runs start: in which order (`start_order`: longest first, `cost`), with how much
of a GPU's memory each needs (`needs`: its kind's measured peak, else `estimated_peak`), and on which executor: the
stage's pool of worker processes (pipeline.gpus.run_at_once, `run_all`) or a Ray cluster (`run_on_ray`).

A run's kind is its group and run name (its seeds share its shapes). Its peak is the largest `peak_gpu_memory_gib`
that the summaries of its kind's seeds hold, from their last runs (whatever their fingerprint), and, within the
stage, the peaks its runs report as they end (`Needs.learn`); before any run of the kind has measured one, an
estimate from the model's shape, the agents and the update's batch. So a card is filled by what its runs hold, not
by their count: `runtime.workers` stays the most processes per GPU.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Callable

from cory.files import read_json
from cory.runs.config import Job
from cory.schema import ConfigError
from pipeline.gpus import (DETERMINISTIC, deterministic_torch, error_line, processes_at_once, release_memory_after,
                           run_at_once, say_failure)
from pipeline.paths import ROOT


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


OVERHEAD_GIB = 1.0
"""What a run holds on its GPU beyond its tensors' peak (summary.json's peak_gpu_memory_gib is torch's
max_memory_allocated): its CUDA context and the allocator's cached blocks. An allowance, not a measurement; the
repro's usage log (reports/<profile>/usage.csv) shows what the runs held in all."""


def kind(job: Job) -> str:
    return f"{job.group}/{job.run}"


def measured_peaks(jobs: list[Job]) -> dict[str, float]:
    """Each run kind's peak GPU memory in GiB, the largest its seeds' summaries hold (read before the plan replaces
    any of them)."""
    peaks: dict[str, float] = {}
    for job in jobs:
        try:
            peak = read_json(Path(job.run_dir) / "summary.json").get("peak_gpu_memory_gib")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(peak, (int, float)) and peak > 0:
            peaks[kind(job)] = max(peaks.get(kind(job), 0.0), float(peak))
    return peaks


@functools.cache
def longest_query(prompts: str) -> int:
    """The characters of the longest query in a prompt file."""
    from cory.runs.run import load_queries

    return max(map(len, load_queries(prompts)[0]))


def model_shape(folder: str) -> tuple[int, int, int, int] | None:
    """(parameters, layers, hidden size, vocabulary) of a model folder, from its config.json and its safetensors
    headers; None where it is no local folder."""
    config = Path(folder) / "config.json"
    if not config.is_file():
        return None
    shape = read_json(config)
    params = 0
    for file in Path(folder).glob("*.safetensors"):
        with open(file, "rb") as fh:  # the header: 8 bytes of length, then JSON of every tensor's shape
            header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
        params += sum(functools.reduce(int.__mul__, t["shape"], 1) for k, t in header.items() if k != "__metadata__")
    layers = shape.get("num_hidden_layers") or shape.get("n_layer")
    hidden = shape.get("hidden_size") or shape.get("n_embd")
    if not (params and layers and hidden and shape.get("vocab_size")):
        return None
    return params, layers, hidden, shape["vocab_size"]


def estimated_peak(job: Job) -> float | None:
    """A run's peak GPU memory in GiB before any run of its kind has measured one: each agent's weights, gradients,
    Adam moments and bf16 copy (20 bytes a parameter) and the frozen reference's weights (4), and an update
    micro-batch's activations, per token 34 bytes for each layer's hidden unit (16-bit activations without attention
    scores: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models") and 10 for each
    vocabulary entry (bf16 logits, fp32 log-probabilities and their gradient). A prompt is counted at 4 characters a
    token: the longest query, and the observer's (knowledge transfer) with its template and the pioneer's response.
    Against the peaks the default profile's 8 run kinds measured in its committed repro (reports/default/runs.tgz)
    it is within a factor of 2.6: over for the scratch models' CORY runs, under for SmolLM2's; a run that runs out of
    memory starts again with more (pipeline.gpus.run_at_once), and a run of the kind that ends sets what it measured.
    None for a model in no local folder."""
    shape = model_shape(job.model)
    if shape is None:
        return None
    params, layers, hidden, vocab = shape
    ppo, agents = job.train.ppo, job.train.cory.n_agents
    response = ppo.generation.response_length[1]
    tokens = longest_query(job.task.prompts) / 4 + response
    if agents > 1 and job.train.cory.knowledge_transfer:
        tokens = max(tokens, (len(job.train.cory.observer_template) + 2 * longest_query(job.task.prompts)) / 4
                     + 2 * response)
    rows = ppo.mini_batch_size // ppo.gradient_accumulation_steps
    weights = (20 * agents + 4) * params
    return (weights + rows * tokens * (34 * layers * hidden + 10 * vocab)) / 2**30


class Needs(dict):
    """{run name: GiB it needs on its GPU}: its kind's peak, measured or estimated, and OVERHEAD_GIB; `learn` takes
    a peak that a run of the kind reports as it ends to the runs of its kind still queued or running."""

    def __init__(self, jobs: list[Job], peaks: dict[str, float]):
        self.kinds = {job.name: kind(job) for job in jobs}
        measured = {job.name: peaks.get(kind(job)) or estimated_peak(job) for job in jobs}
        super().__init__({name: peak + OVERHEAD_GIB for name, peak in measured.items() if peak is not None})
        self.learned: dict[str, float] = {}

    def learn(self, name: str, summary: dict) -> None:
        peak = summary.get("peak_gpu_memory_gib") if isinstance(summary, dict) else None
        if not isinstance(peak, (int, float)) or peak <= 0:
            return
        of = self.kinds.get(name)
        self.learned[of] = max(self.learned.get(of, 0.0), float(peak))
        for other, its in self.kinds.items():
            if its == of:
                self[other] = self.learned[of] + OVERHEAD_GIB


def run_all(run_job: Callable, todo: list[Job], settings: tuple, workers: int, gpus: list[str], mps: bool = False,
            needs: Needs | None = None) -> tuple[list[dict], dict[str, str]]:
    """Train every job with `run_job(job, *settings)`, at most `workers` at once per GPU (in all, without one) and,
    with `needs`, as many as their GPU's memory holds, started in `todo`'s order (start_order's), under a CUDA MPS
    daemon where `mps` asks for one and runs share a GPU; returns (summaries of the runs that finished, {run name:
    error} of those that failed). One run's failure (out of GPU memory, a non-finite loss, a CUDA error, a killed
    worker process) stops that run only: the others train on, and a rerun of the stage keeps them (fingerprints) and
    resumes the failed ones from their checkpoints. On the CPU one worker at a time trains in this process (no CUDA
    context to lose); with a GPU every run trains in a worker process (pipeline.workers)."""
    failed: dict[str, str] = {}
    processes = processes_at_once(workers, gpus)
    if processes == 1 and not gpus:
        summaries = []
        for job in todo:
            try:
                summaries.append(run_job(job, *settings))
            except Exception as exc:  # noqa: BLE001 - reported, with every other failure, when all runs are done
                say_failure(job.name, exc, "train")
                failed[job.name] = error_line(exc)
        return summaries, failed
    calls = {job.name: (run_job, (job, *settings)) for job in todo}
    return run_at_once(calls, processes, gpus, mps, "train", {job.name: float(cost(job)) for job in todo}, needs,
                       on_done=None if needs is None else needs.learn)


DETERMINISM_VARIABLES = (DETERMINISTIC, "CUBLAS_WORKSPACE_CONFIG")
"""What pipeline.gpus.deterministic_kernels sets in the stage's environment, passed on to Ray's workers."""


def on_ray_worker(function, *args):
    """A call in a Ray worker, which runs no pool initializer: torch's deterministic flags where the stage set them
    (pipeline.gpus.start_worker's part), then the call under release_memory_after."""
    deterministic_torch()
    return release_memory_after(function, *args)


def importable(function: Callable) -> Callable:
    """`function` by its importable name: a stage run as `python -m pipeline.<stage>` defines its functions in
    __main__, which a Ray worker cannot import."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if function.__module__ == "__main__" and spec is not None:
        return getattr(importlib.import_module(spec.name), function.__qualname__)
    return function


def run_on_ray(run_job: Callable, todo: list[Job], settings: tuple, workers: int) -> tuple[list[dict], dict[str, str]]:
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
        # Ray's workers outlive their tasks too: each run gives back its GPU memory as it ends (release_memory_after)
        task = ray.remote(on_ray_worker).options(max_retries=0, **({"num_gpus": 1 / workers} if has_gpu
                                                                           else {"num_cpus": 1}))
        refs = {task.remote(importable(run_job), job, *settings): job for job in todo}
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
