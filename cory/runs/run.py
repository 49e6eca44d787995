"""One RL run end to end (a `Job` of cory.runs.config): load the base model and the task, train, and write the run
folder. `run_training` does it in four phases, `_setup`, `_resume`, `_train` and `_finish`:

    <run_dir>/history.csv     one row per iteration (metric keys: cory.rl.metrics.GLOSSARY)
    <run_dir>/summary.json    final values (mean over the last iterations), wall time, peak GPU memory,
                              phase_seconds: this process's wall time by phase (setup, samples, iterations, probes,
                              logging, checkpoints, save), decoding_shapes: per agent, the [batch size, cache
                              length] of each decoding step it compiled (cory.rl.decoding.cache_shapes)
    <run_dir>/samples.jsonl   LLM1 alone on fixed queries before training (iteration -1) and after (iteration N),
                              the generations of the first and the last training iteration, and the task's held-out
                              prompts answered alone by the base model and each trained agent (TaskConfig.held_out)
    <run_dir>/config.json     the resolved TrainConfig
    <run_dir>/role_swap.json  CORY with held-out prompts (TaskConfig.held_out): each agent's task reward in each role
                              on them, as trained and with the roles swapped (cory.rl.role_swap)
    <run_dir>/provenance.json device, package versions, git commit
    <checkpoint_dir>/llm1/, llm2/   the trained agents as plain transformers models (if saved)

Weights live apart from the run's small files (a separate DVC output), so the report can be rebuilt from the small
files alone, on a machine that never held the weights.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cory.files import atomic_write, folder_records
from cory.runs.config import Job
from cory.schema import ConfigError, to_dict


def load_queries(path: str | Path) -> tuple[list[str], list[str] | None]:
    """RL prompts from a jsonl file: (queries, gold answers or None). Rows hold "query" (or GSM8K's "question") and,
    if the first row has one, every row an "answer"; a bad row is one error naming the file and its line."""
    from cory.files import iter_jsonl
    from cory.tasks.rewards import gsm8k_answer

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


def training_prompts(job: Job, n_prompts: int) -> int:
    """How many rows of the prompt file training draws from: all but the task's last `held_out` (answered after
    training, and by CORY in swapped roles), which must leave a batch's queries; else one ConfigError naming the
    setting, before the model loads."""
    held, need = job.task.held_out, job.train.ppo.queries_per_batch
    if held and n_prompts - held < need:
        raise ConfigError(f"tasks.<the task of experiments.{job.group}>.held_out: holding out {held} of the "
                          f"{n_prompts} prompts of {job.task.prompts} leaves {n_prompts - held}, fewer than the "
                          f"{need} queries of a batch (run {job.name})")
    return n_prompts - held


def load_lm(name_or_path: str, device: str, load_in_4bit: bool = False):
    """The run's base LM on `device`; with `load_in_4bit` (train.load_in_4bit) quantised to NF4 as it loads, after
    checking that bitsandbytes and a GPU are there (one ConfigError otherwise, before any weight is read)."""
    from transformers import AutoModelForCausalLM

    from cory.hf import load_pretrained
    from cory.rl.lora import nf4_quantization_config

    if load_in_4bit:  # a quantised model is placed by device_map as it loads; .to() cannot move it
        quantization = {"quantization_config": nf4_quantization_config(device), "device_map": {"": device}}
        return load_pretrained(AutoModelForCausalLM.from_pretrained, name_or_path, "model", **quantization)
    return load_pretrained(AutoModelForCausalLM.from_pretrained, name_or_path, "model").to(device)


def load_agent(path: str | Path, device: str = "cpu"):
    """(model, tokenizer) of a trained agent (a folder `Trainer.save` or a run wrote), or of any causal LM folder or
    hub name: `AutoModelForCausalLM.from_pretrained(path)` in eval mode on `device`, and its tokenizer with a pad token
    and left padding (load_tokenizer), ready to generate or to train again. An error names the path in one line."""
    from cory.tasks.tokenizer import load_tokenizer

    return load_lm(str(path), device).eval(), load_tokenizer(str(path), "model")


def check_positions(job: Job, lm) -> None:
    """The run's longest response leaves room for a prompt in the loaded model's positions (the train stage checks
    models in local folders before any run starts; a hub model's are known here, before its first iteration)."""
    from cory.rl.decoding import model_positions

    positions, longest = model_positions(lm), job.train.ppo.generation.response_length[1]
    if positions is not None and longest >= positions:
        raise ConfigError(f"train.ppo.generation.response_length: {longest} new tokens leave no room for a prompt in "
                          f"the {positions} positions of {job.model} (run {job.name})")


@dataclass
class _Run:
    """What the phases of `run_training` share: the run's inputs, its trainer and writer, and where its time goes."""

    job: Job
    device: str
    phase: Any
    """cory.rl.trainer.PhaseTimer: this process's wall time by phase, summary.json's phase_seconds."""
    start: float
    queries: list[str]
    answers: list[str] | None
    tokenizer: Any
    trainer: Any
    writer: Any
    resumed: dict | None
    """The `extra` of the checkpoint the run continues from, or None."""

    @property
    def run_dir(self) -> Path:
        return Path(self.job.run_dir)

    @property
    def resume_dir(self) -> Path:
        return Path(self.job.checkpoint_dir or self.job.run_dir) / "resume"

    def held_out(self, iteration: int) -> list[dict]:
        """The task's held-out prompts (TaskConfig.held_out) answered alone: by LLM1 before training (the base model:
        LLM2 is its copy), by each agent after; rows marked "held_out"."""
        n = self.job.task.held_out
        if not n:
            return []
        queries, answers = self.queries[-n:], None if self.answers is None else self.answers[-n:]
        agents = range(len(self.trainer.agents)) if iteration >= 0 else range(1)
        return [{**row, "held_out": True} for i in agents
                for row in self.trainer.generate_alone(queries, answers, iteration, agent=i)]

    @property
    def fixed(self) -> tuple[list[str], list[str] | None]:
        """The queries (and answers) LLM1 answers alone before and after training: the task's table queries, else the
        first `train.samples_to_log` RL prompts."""
        n, task = self.job.train.samples_to_log, self.job.task
        if task.table_queries:
            return task.table_queries, None
        return self.queries[:n], None if self.answers is None else self.answers[:n]


def run_training(job: Job, device: str, tracker=None, log_every: int = 1, checkpoint_every: int = 0,
                 last_n: int = 10) -> dict:
    """Train one run and write its folder (see the module docstring). Returns the summary, whose final values are the
    means over the last `last_n` iterations (report.last_n: the report's definition of a final value).

    With `checkpoint_every` k > 0 the whole training state is saved every k iterations (cory.rl.checkpoint) under
    <checkpoint_dir>/resume/, and a run that finds a checkpoint of its own fingerprint there continues from it: the
    history it ends with is the one an uninterrupted run of the same seed writes. The checkpoint is deleted when the
    run completes."""
    run = _setup_or_start_over(job, device)
    samples, first, spent = _resume(run, tracker)
    samples = _train(run, samples, first, spent, tracker, log_every, checkpoint_every)
    return _finish(run, samples, first, spent, tracker, last_n)


def _setup(job: Job, device: str) -> _Run:
    """Seed, then load the prompts, tokenizer, model and reward, and build the trainer (from its checkpoint, if any)."""
    import torch  # here: the train stage's own process imports this module and trains nothing itself

    from cory.rl.checkpoint import load_checkpoint
    from cory.rl.metrics import MetricsWriter
    from cory.rl.trainer import PhaseTimer, Trainer
    from cory.tasks.rewards import build_reward
    from cory.tasks.tokenizer import load_tokenizer

    torch.manual_seed(job.seed)
    np.random.seed(job.seed)
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.time()
    phase = PhaseTimer(device)  # where this process's wall time went, in summary.json's phase_seconds
    with phase("setup"):
        queries, answers = load_queries(job.task.prompts)
        training_prompts(job, len(queries))
        tokenizer = load_tokenizer(job.model, "model")
        lm = load_lm(job.model, device, job.train.load_in_4bit)
        check_positions(job, lm)
        if job.task.reward == "sentiment":
            reward = build_reward("sentiment", model_name_or_path=job.task.reward_model, device=device,
                                  max_length=job.task.reward_max_length, truncation=job.task.reward_truncation)
        else:
            reward = build_reward("math")
        trainer = Trainer(job.train, lm, tokenizer, reward, seed=job.seed)
        writer = MetricsWriter(job.run_dir)
        resumed = load_checkpoint(Path(job.checkpoint_dir or job.run_dir) / "resume", trainer)
        if resumed is not None:
            covered(writer.history_path, trainer.iteration)
    return _Run(job, device, phase, start, queries, answers, tokenizer, trainer, writer, resumed)


def covered(history: Path, iterations: int) -> None:
    """A resumed run's history.csv holds a row for each iteration its checkpoint covers (a header, then one line per
    row), else a CheckpointError naming it: the run then starts over, as with a damaged checkpoint."""
    from cory.rl.checkpoint import CheckpointError

    try:
        with open(history, "rb") as fh:
            rows = sum(1 for _ in fh) - 1
    except OSError as exc:
        raise CheckpointError(f"{history}: cannot be read ({exc})") from None
    if rows < iterations:
        raise CheckpointError(f"{history}: holds {max(rows, 0)} rows, fewer than the {iterations} iterations the "
                              "run's checkpoint covers")


def _setup_or_start_over(job: Job, device: str) -> _Run:
    """`_setup`; where the run's resume checkpoint cannot be loaded (cory.rl.checkpoint.CheckpointError, naming the
    file), the run starts over from nothing (its checkpoint and run folder deleted, the trainer built again: the
    half-restored one is dropped), as a run without a checkpoint would: one damaged checkpoint costs its run's
    iterations so far, never the stage."""
    from cory.rl.checkpoint import CheckpointError

    try:
        return _setup(job, device)
    except CheckpointError as exc:
        reason = str(exc)  # the half-restored trainer goes with the exception, at the end of this block
    resume = Path(job.checkpoint_dir or job.run_dir) / "resume"
    print(f"[train] {job.name}: {reason}: the run starts over", flush=True)
    shutil.rmtree(resume, ignore_errors=True)
    shutil.rmtree(job.run_dir, ignore_errors=True)
    return _setup(job, device)


def _resume(run: _Run, tracker) -> tuple[list[dict], int, float]:
    """(the samples logged so far, the first iteration to train, the seconds spent before): a new run writes its
    config and provenance and samples LLM1 alone before training; a resumed one takes them from its checkpoint and
    keeps the history it covers."""
    from cory.tracking.tags import provenance

    job, resumed = run.job, run.resumed
    if resumed is not None and resumed.get("fingerprint") != job.fingerprint:
        raise ValueError(f"{run.resume_dir}: the checkpoint belongs to another version of {job.name} (fingerprint "
                         f"{resumed.get('fingerprint')!r}, this run's {job.fingerprint!r}); delete it to start over")
    if resumed is None:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(run.run_dir / "config.json", json.dumps(to_dict(job.train), indent=2) + "\n")
        atomic_write(run.run_dir / "provenance.json",
                     json.dumps({"run": job.name, "model": job.model, **provenance(run.device)}, indent=2) + "\n")
        with run.phase("samples"):
            before = run.trainer.generate_alone(*run.fixed, iteration=-1) + run.held_out(-1)
        if tracker is not None:
            tracker.log_samples(before, job.train.iterations)
        return before, 0, 0.0
    first = run.trainer.iteration
    for row in run.writer.resume(first):  # the history the checkpoint covers, and nothing after it
        if tracker is not None:
            tracker.log_metrics(row, step=int(row["iteration"]))
    if tracker is not None:  # this run's table starts with the samples its checkpoint kept
        tracker.log_samples(resumed["samples"], job.train.iterations)
    print(f"[train] {job.name}: resumed after iteration {first - 1} from {run.resume_dir}", flush=True)
    return resumed["samples"], first, resumed["seconds"]


def _train(run: _Run, samples: list[dict], first: int, spent: float, tracker, log_every: int,
           checkpoint_every: int) -> list[dict]:
    """The training iterations from `first` on (Algorithm 1's loop), with the probes, the logging and the resume
    checkpoints; returns the samples with those of the first and last iteration added. A failure is marked with its
    iteration (and, by cory.rl.trainer.PhaseTimer, its phase), which the stage's one line about it names."""
    job, queries = run.job, run.queries
    drawn = training_prompts(job, len(queries))  # the held-out prompts (tasks.<task>.held_out) are never drawn
    for it, idx in enumerate(batches(drawn, job.train.ppo.queries_per_batch, job.train.iterations, job.seed)):
        if it < first:
            continue  # drawn again, not trained: the batch sequence is the uninterrupted run's
        try:
            samples = _iteration(run, it, idx, samples, spent, tracker, log_every, checkpoint_every)
        except Exception as exc:
            exc.iteration = it
            raise
    return samples


def _iteration(run: _Run, it: int, idx, samples: list[dict], spent: float, tracker, log_every: int,
               checkpoint_every: int) -> list[dict]:
    """Iteration `it` on the queries at `idx`: Trainer.step, the probe, the logging and the resume checkpoint."""
    from cory.rl.checkpoint import save_checkpoint

    job, trainer, queries, answers, phase = run.job, run.trainer, run.queries, run.answers, run.phase
    last = job.train.iterations - 1
    batch_answers = [answers[i] for i in idx] if answers is not None else None
    with phase("iterations"):
        metrics = trainer.step([queries[i] for i in idx], batch_answers)
    every = job.train.probe_every
    if every and (it % every == 0 or it == last):  # the same prompts every time (TrainConfig.probe_every)
        n = job.train.probe_queries
        with phase("probes"):
            metrics.update(trainer.probe(queries[-n:], answers[-n:] if answers is not None else None))
    with phase("logging"):
        run.writer.log(it, metrics)
        if tracker is not None and (it % log_every == 0 or it == last):
            tracker.log_metrics(metrics, step=it)
            tracker.log_samples(trainer.last_samples, job.train.iterations)  # the generations beside the metrics
    if it in (0, last):
        samples += trainer.last_samples
    if checkpoint_every and (it + 1) % checkpoint_every == 0 and it < last:
        with phase("checkpoints"):
            save_checkpoint(run.resume_dir, trainer, {"fingerprint": job.fingerprint, "samples": samples,
                                                      "seconds": spent + time.time() - run.start})
    return samples


def _finish(run: _Run, samples: list[dict], first: int, spent: float, tracker, last_n: int) -> dict:
    """LLM1 alone after training, the role-swap test (CORY with held-out prompts), the samples and the trained agents
    saved, summary.json written; the resume checkpoint deleted (the run is complete)."""
    import torch

    from cory.rl.decoding import cache_shapes
    from cory.rl.role_swap import role_swap_test

    job, trainer, phase = run.job, run.trainer, run.phase
    with phase("samples"):
        after = trainer.generate_alone(*run.fixed, iteration=job.train.iterations) + run.held_out(job.train.iterations)
    samples += after
    held = job.task.held_out
    if held and len(trainer.agents) == 2:
        with phase("role_swap"):
            result = role_swap_test(trainer, run.queries[-held:], None if run.answers is None else run.answers[-held:])
            atomic_write(run.run_dir / "role_swap.json", json.dumps(result, indent=2) + "\n")
    saved = Path(job.checkpoint_dir or run.run_dir)
    with phase("save"):
        run.writer.samples(samples)
        if job.save_models:
            for agent in trainer.agents:
                agent.save(saved / agent.name, run.tokenizer)
        # what the run wrote, recorded in its summary: a rerun keeps the run only while its files are these
        # (pipeline.train.finished_summary); summary.json itself, written last, is not among them
        files = folder_records(run.run_dir, leave_out=("summary.json",), lines=("history.csv",))
        agents = [agent.name for agent in trainer.agents] if job.save_models else []
        saved_files = {f"{name}/{file}": record for name in agents
                       for file, record in folder_records(saved / name).items()}
    # Peak GPU memory this run's tensors held (one process; the train stage runs runtime.workers of them at once).
    cuda = torch.device(run.device).type == "cuda"
    peak = torch.cuda.max_memory_allocated(run.device) / 2**30 if cuda else None
    summary = run.writer.summary(last_n=min(last_n, job.train.iterations), wall_time_s=spent + time.time() - run.start,
                                 peak_gpu_memory_gib=peak, run=job.name, algorithm=job.algorithm, seed=job.seed,
                                 fingerprint=job.fingerprint, resumed_after=None if run.resumed is None else first - 1,
                                 phase_seconds={name: round(seconds, 2) for name, seconds in phase.totals.items()},
                                 decoding_shapes={agent.name: cache_shapes(agent.compute_lm)
                                                  for agent in trainer.agents},
                                 files=files, **({"saved_files": saved_files} if job.save_models else {}))
    shutil.rmtree(run.resume_dir, ignore_errors=True)  # summary.json marks the run complete: nothing left to resume
    if tracker is not None:
        tracker.log_samples(after, job.train.iterations)
    return summary
