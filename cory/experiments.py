"""Experiments: named groups of RL runs (PPO and CORY variants x seeds) that share one `train` config block.

A run's config is `train` (the block every run reads) <- the group's overrides <- the run's overrides, plus its seed,
so the PPO baseline and every CORY variant differ only where params.yaml says they do. `run_training` executes one
run end to end: load the base model and the task, train, and write the run folder:

    <run_dir>/history.csv     one row per iteration (metric keys: cory.metrics.GLOSSARY)
    <run_dir>/summary.json    final values (mean over the last iterations), wall time, peak GPU memory,
                              phase_seconds: this process's wall time by phase (setup, samples, iterations, probes,
                              logging, checkpoints, save), decoding_shapes: per agent, the [batch size, cache
                              length] of each decoding step it compiled (cory.decoding.cache_shapes)
    <run_dir>/samples.jsonl   LLM1 alone on fixed queries before training (iteration -1) and after (iteration N),
                              and the generations of the first and the last training iteration
    <run_dir>/config.json     the resolved TrainConfig
    <run_dir>/provenance.json device, package versions, git commit
    <checkpoint_dir>/llm1/, llm2/   the trained agents as plain transformers models (if saved)

Weights live apart from the run's small files (a separate DVC output), so the report can be rebuilt from the small
files alone, on a machine that never held the weights.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from cory.config import ConfigError, CORYConfig, TrainConfig, check, from_dict, merge, section_path, to_dict


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
    prompt_template: str = TrainConfig.prompt_template
    """The pioneer's (and PPO's) prompt in every run of the task: each run's train.prompt_template. The math task's
    is also the pass@k prompt (evaluation.prompt_template)."""
    observer_template: str = CORYConfig.observer_template
    """The observer's prompt with knowledge transfer in every run of the task: each run's
    train.cory.observer_template."""
    table_queries: list[str] = field(default_factory=list)
    """Fixed queries LLM1 continues alone before and after training (the paper's Table 3); empty: the first
    `train.samples_to_log` RL prompts."""

    def __post_init__(self) -> None:
        path = section_path("task")
        check(self.reward != "sentiment" or bool(self.reward_model), f"{path}.reward_model", "required for sentiment")
        check("{query}" in self.prompt_template, f"{path}.prompt_template", "must contain {query}")
        check("{query}" in self.observer_template and "{response}" in self.observer_template,
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


def check_layer(layer: dict, where: str, sweep: bool = False, single_agent: bool = False) -> None:
    """A train block (`train`, a group's or a run's) may not write a setting that the run would not read: one that
    FILLED or the group's sweep_eta sets per run, or, in a PPO run's own block, a CORY setting."""
    filled = dict(FILLED)
    if sweep:
        filled[("ppo", "init_kl_coef")] = "the group's sweep_eta (one run per KL coefficient)"
    for path, source in filled.items():
        if _written(layer, path):
            raise ConfigError(f"{where}.{'.'.join(path)}: set per run from {source}; remove it (one source per setting)")
    for key in (layer.get("cory") or {}) if single_agent else ():
        if key != "n_agents":
            raise ConfigError(f"{where}.cory.{key}: ignored: this run trains one agent (cory.n_agents 1); remove it")


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
    check_layer(exp.train, f"experiments.{group}.train", sweep)
    specs: dict[str, tuple[RunSpec, dict]] = {}
    for name, spec in exp.runs.items():
        n_agents = (merge(merge(base_train, exp.train), spec.train).get("cory") or {}).get("n_agents")
        check_layer(spec.train, f"experiments.{group}.runs.{name}.train", sweep, single_agent=n_agents == 1)
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
            folder = Path(group, name, f"seed{seed}")
            jobs.append(Job(group, name, seed, train, task, spec.model or task.model, str(runs_dir / folder),
                            exp.save_models, str((checkpoints_dir or runs_dir) / folder)))
    return jobs


def load_queries(path: str | Path) -> tuple[list[str], list[str] | None]:
    """RL prompts from a jsonl file: (queries, gold answers or None). Rows hold "query" (or GSM8K's "question") and,
    if the first row has one, every row an "answer"; a bad row is one error naming the file and its line."""
    from cory.data import iter_jsonl
    from cory.rewards import gsm8k_answer

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: RL prompt file not found (did its data stage run?)")
    rows = list(iter_jsonl(path))
    if not rows:
        raise ValueError(f"{path}: no prompts")
    first = rows[0][1]
    key = "query" if "query" in first else "question"
    with_answers = "answer" in first
    queries, answers = [], []
    for line, row in rows:
        if not isinstance(row.get(key), str):
            raise ValueError(f"{path}:{line}: needs a string 'query' (or 'question') field, got fields {sorted(row)}")
        queries.append(row[key])
        if with_answers:
            if not isinstance(row.get("answer"), str):
                raise ValueError(f"{path}:{line}: needs a string 'answer' field, as the first row has")
            try:
                answers.append(gsm8k_answer(row["answer"]))
            except ValueError as exc:
                raise ValueError(f"{path}:{line}: {exc}") from None
    return queries, answers if with_answers else None


def batches(n_items: int, batch_size: int, iterations: int, seed: int):
    """Index batches for `iterations` iterations: shuffled passes over the data, each without replacement."""
    if n_items < batch_size:
        raise ValueError(f"{n_items} prompts cannot fill a batch of {batch_size}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_items)
    pos = 0
    for _ in range(iterations):
        if pos + batch_size > n_items:  # drop the last partial batch and start a new pass, as a DataLoader would
            order, pos = rng.permutation(n_items), 0
        yield order[pos : pos + batch_size]
        pos += batch_size


def load_lm(name_or_path: str, device: str, load_in_4bit: bool = False):
    """The run's base LM on `device`; with `load_in_4bit` (train.load_in_4bit) quantised to NF4 as it loads, after
    checking that bitsandbytes and a GPU are there (one ConfigError otherwise, before any weight is read)."""
    from transformers import AutoModelForCausalLM

    from cory.agents import nf4_quantization_config
    from cory.pretrain import load_pretrained

    if load_in_4bit:  # a quantised model is placed by device_map as it loads; .to() cannot move it
        quantization = {"quantization_config": nf4_quantization_config(device), "device_map": {"": device}}
        return load_pretrained(AutoModelForCausalLM.from_pretrained, name_or_path, "model", **quantization)
    return load_pretrained(AutoModelForCausalLM.from_pretrained, name_or_path, "model").to(device)


def run_training(job: Job, device: str, tracker=None, log_every: int = 1, checkpoint_every: int = 0) -> dict:
    """Train one run and write its folder (see the module docstring). Returns the summary.

    With `checkpoint_every` k > 0 the whole training state is saved every k iterations (cory.checkpoint) under
    <checkpoint_dir>/resume/, and a run that finds a checkpoint of its own fingerprint there continues from it: the
    history it ends with is the one an uninterrupted run of the same seed writes. The checkpoint is deleted when the
    run completes."""
    import torch  # here: validating params (pipeline.params) imports this module, and must not import torch

    from cory.checkpoint import load_checkpoint, save_checkpoint
    from cory.decoding import cache_shapes
    from cory.metrics import MetricsWriter
    from cory.rewards import build_reward
    from cory.tokenizer import load_tokenizer
    from cory.tracking import provenance
    from cory.trainer import PhaseTimer, Trainer

    torch.manual_seed(job.seed)
    np.random.seed(job.seed)
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    start = time.time()
    phase = PhaseTimer(device)  # where this process's wall time went, in summary.json's phase_seconds
    run_dir = Path(job.run_dir)
    resume_dir = Path(job.checkpoint_dir or job.run_dir) / "resume"
    with phase("setup"):
        queries, answers = load_queries(job.task.prompts)
        tokenizer = load_tokenizer(job.model)
        lm = load_lm(job.model, device, job.train.load_in_4bit)
        if job.task.reward == "sentiment":
            reward = build_reward("sentiment", model_name_or_path=job.task.reward_model, device=device)
        else:
            reward = build_reward("math")
        trainer = Trainer(job.train, lm, tokenizer, reward, seed=job.seed)
        writer = MetricsWriter(run_dir)
        resumed = load_checkpoint(resume_dir, trainer)
    n_fixed = job.train.samples_to_log
    fixed = job.task.table_queries or queries[:n_fixed]
    fixed_answers = None if job.task.table_queries or answers is None else answers[:n_fixed]
    if resumed is not None and resumed.get("fingerprint") != job.fingerprint:
        raise ValueError(f"{resume_dir}: the checkpoint belongs to another version of {job.name} (fingerprint "
                         f"{resumed.get('fingerprint')!r}, this run's {job.fingerprint!r}); delete it to start over")
    if resumed is None:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(to_dict(job.train), indent=2) + "\n")
        (run_dir / "provenance.json").write_text(
            json.dumps({"run": job.name, "model": job.model, **provenance(device)}, indent=2) + "\n")
        with phase("samples"):
            samples, first, spent = trainer.generate_alone(fixed, fixed_answers, iteration=-1), 0, 0.0
    else:
        samples, first, spent = resumed["samples"], trainer.iteration, resumed["seconds"]
        for row in writer.resume(first):  # the history the checkpoint covers, and nothing after it
            if tracker is not None:
                tracker.log_metrics(row, step=int(row["iteration"]))
        print(f"[train] {job.name}: resumed after iteration {first - 1} from {resume_dir}", flush=True)
    last = job.train.iterations - 1
    for it, idx in enumerate(batches(len(queries), job.train.ppo.queries_per_batch, job.train.iterations, job.seed)):
        if it < first:
            continue  # drawn again, not trained: the batch sequence is the uninterrupted run's
        batch_answers = [answers[i] for i in idx] if answers is not None else None
        with phase("iterations"):
            metrics = trainer.step([queries[i] for i in idx], batch_answers)
        every = job.train.probe_every
        if every and (it % every == 0 or it == last):  # the same prompts every time (TrainConfig.probe_every)
            n = job.train.probe_queries
            with phase("probes"):
                metrics.update(trainer.probe(queries[-n:], answers[-n:] if answers is not None else None))
        with phase("logging"):
            writer.log(it, metrics)
            if tracker is not None and (it % log_every == 0 or it == last):
                tracker.log_metrics(metrics, step=it)
        if it in (0, last):
            samples += trainer.last_samples
        if checkpoint_every and (it + 1) % checkpoint_every == 0 and it < last:
            with phase("checkpoints"):
                save_checkpoint(resume_dir, trainer, {"fingerprint": job.fingerprint, "samples": samples,
                                                      "seconds": spent + time.time() - start})
    with phase("samples"):
        samples += trainer.generate_alone(fixed, fixed_answers, iteration=job.train.iterations)
    with phase("save"):
        writer.samples(samples)
        if job.save_models:
            for agent in trainer.agents:
                agent.save(Path(job.checkpoint_dir or run_dir) / agent.name, tokenizer)
    # Peak GPU memory this run's tensors held (one process; the train stage runs runtime.workers of them at once).
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
    summary = writer.summary(last_n=min(10, job.train.iterations), wall_time_s=spent + time.time() - start,
                             peak_gpu_memory_gib=peak, run=job.name, algorithm=job.algorithm, seed=job.seed,
                             fingerprint=job.fingerprint, resumed_after=None if resumed is None else first - 1,
                             phase_seconds={name: round(seconds, 2) for name, seconds in phase.totals.items()},
                             decoding_shapes={agent.name: cache_shapes(agent.compute_lm) for agent in trainer.agents})
    shutil.rmtree(resume_dir, ignore_errors=True)  # summary.json marks the run complete: nothing left to resume
    if tracker is not None:
        tracker.log_samples(run_dir / "samples.jsonl", job.train.iterations)
    return summary


def parse_experiment(params: dict, group: str) -> tuple[ExperimentConfig, TaskConfig]:
    experiments = params.get("experiments") or {}
    if group not in experiments:
        raise ConfigError(f"experiments.{group}: no such experiment group (known: {', '.join(experiments)})")
    exp = from_dict(ExperimentConfig, experiments[group], f"experiments.{group}")
    tasks = params.get("tasks") or {}
    if exp.task not in tasks:
        raise ConfigError(f"experiments.{group}.task: unknown task {exp.task!r} (known: {', '.join(tasks)})")
    return exp, from_dict(TaskConfig, tasks[exp.task], f"tasks.{exp.task}")
