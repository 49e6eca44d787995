"""Benchmark: where an RL iteration's time goes, and how many runs should share one GPU.

    python -m benchmark.rl [--group imdb --run cory] [--iterations 6] [--workers 1 4 8 14] [--profile]
                               [--variant ppo.speed.mixed_precision=false ...] [--warmup 2] [--trace DIR] [--mps]
                                                                                (from the project root)

Builds the profile's run (params.yaml or $CORY_PARAMS: its resolved train config, model shape and prompt template) on randomly
initialised models of the same shapes (the time of a step does not depend on the weights, and no pipeline stage has
to run first), then prints
  - one process alone: seconds per iteration, split into generation / scoring / update (cory.rl.trainer timings);
  - with --workers: N processes training at once on the GPU, as the train stage runs them, and the throughput
    (iterations per second over all of them) relative to one process, measured side by side in this one run;
  - with --profile: the CUDA kernels that take the most GPU time in one iteration, and the host-side operators
    that take the most CPU time; with --trace DIR also that iteration's Chrome trace (DIR/<group>-<run>-<n>.json,
    n the variant's index; open in chrome://tracing or Perfetto);
  - with --variant: the same measurements again with those train settings changed (comma-separated dotted
    KEY=VALUE, values read as YAML), after the profile's own settings, in this one run.
Nothing is written; it needs a GPU to say anything useful (on CPU it runs, slowly).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmark.common import dotted_overrides, first_seed_job, profile_iteration, queries_of, with_settings


def build(group: str, run: str, work: Path, variant: str = ""):
    """(TrainConfig, lm, tokenizer, reward_fn, queries, answers) for one run of the profile, on random weights; the
    queries are of the task's kind (word openings, or generated math problems whose words the math model's corpus
    vocabulary has: other words would split into bytes and make its prompts longer than its positions)."""
    from cory.tasks.classifier import build_classifier
    from cory.tasks.config import ClassifierConfig
    from cory.hf import save_model
    from cory.tasks.pretrain import build_causal_lm
    from cory.tasks.rewards import build_reward
    from cory.tasks.tokenizer import CORPUS_VOCABULARY
    from pipeline.base_models import scratch_tokenizer
    from pipeline.common import device
    from pipeline.params import load_params

    params = load_params()  # params.yaml, or $CORY_PARAMS
    job = first_seed_job(params, group, run)
    if job is None:
        raise ValueError(f"the params have no run {group}/{run}")
    task = job.task
    train = with_settings(job.train, dotted_overrides(variant))  # over the group's own settings too
    base = params.base_models[job.model]
    texts = []
    if base.tokenizer == CORPUS_VOCABULARY:  # the generated problems stand in for the stage's prepared corpus
        from cory.tasks.mathgen import generate_problems, pretraining_texts

        problems = generate_problems(params.data.math.generator)["pretrain"]
        texts = pretraining_texts(problems, slip_rate=base.slip_rate)
    tokenizer = scratch_tokenizer(base, texts)  # the base-model stage's choice
    shape = base.lm
    lm = build_causal_lm(shape, len(tokenizer), tokenizer.eos_token_id).to(device())
    if task.reward == "sentiment":
        classifier = build_classifier(tokenizer, ClassifierConfig(lm=shape))
        save_model(classifier, tokenizer, work / "reward")
        reward = build_reward("sentiment", model_name_or_path=str(work / "reward"), device=device())
    else:
        reward = build_reward("math")
    queries, answers = queries_of(task.reward, train.ppo.queries_per_batch)
    return train, lm, tokenizer, reward, queries, answers


def time_iterations(group: str, run: str, iterations: int, warmup: int = 2, profile: bool = False,
                    variant: str = "", barrier=None, trace: Path | None = None) -> dict:
    """Train `warmup + iterations` iterations; returns mean seconds per iteration and per phase (after warmup)."""
    import torch

    from cory.rl.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg, lm, tokenizer, reward, prompts, answers = build(group, run, Path(tmp), variant)
        trainer = Trainer(replace(cfg, samples_to_log=0), lm, tokenizer, reward, seed=0)
        if barrier is not None:
            barrier.wait()  # every process has built its models: time only the training
        start = time.perf_counter()
        for _ in range(warmup):
            trainer.step(prompts, answers)
        warmup_seconds = time.perf_counter() - start
        if barrier is not None:
            # and every process is past its warm-up (compilations take each a different time): the timed iterations
            # run side by side, not beside another process's compilation
            barrier.wait()
        rows = []
        start = time.perf_counter()
        for _ in range(iterations):
            metrics = trainer.step(prompts, answers)
            rows.append({k[len("timing/"):]: v for k, v in metrics.items() if k.startswith("timing/")})
        wall = time.perf_counter() - start
        result = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
        result["wall_per_iteration"] = wall / iterations
        result["median_iteration"] = statistics.median(r["iteration"] for r in rows)  # a stray recompile aside
        result["warmup_seconds"] = warmup_seconds  # includes any compilation
        if profile and torch.cuda.is_available():
            result["profile"] = profile_iteration(lambda: trainer.step(prompts, answers),
                                                  result["wall_per_iteration"], trace)
    return result


def _worker(args):
    group, run, iterations, warmup, variant, barrier, workers = args
    from pipeline.gpus import share_cpus

    share_cpus(workers)  # as the train stage's workers do
    return time_iterations(group, run, iterations, warmup, variant=variant, barrier=barrier)


def concurrent(group: str, run: str, iterations: int, workers: int, variant: str = "", warmup: int = 2) -> list[dict]:
    """`workers` processes training at once (all start their warm-up together); each one's timings."""
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(workers)
        with context.Pool(workers) as pool:
            return pool.map(_worker, [(group, run, iterations, warmup, variant, barrier, workers)] * workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group", default="imdb")
    parser.add_argument("--run", default="cory")
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--workers", type=int, nargs="*", default=[])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-baseline", action="store_true", help="time the variants only")
    parser.add_argument("--mps", action="store_true",
                        help="run everything under a CUDA MPS daemon, as the train stage does with runtime.mps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first (compilation happens here)")
    parser.add_argument("--trace", type=Path, help="with --profile: write each variant's Chrome trace here")
    parser.add_argument("--variant", action="append", default=[], help="e.g. ppo.speed.mixed_precision=false")
    args = parser.parse_args()

    from pipeline.gpus import mps_daemon, visible_gpus, worker_gpus

    with mps_daemon(args.mps) as under_mps:  # started before this process's CUDA context, so that it is a client too
        if under_mps and "CUDA_VISIBLE_DEVICES" in os.environ:  # its clients name its GPUs by position (worker_gpus)
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(worker_gpus(visible_gpus(), True))
        run(args)


def run(args: argparse.Namespace) -> None:
    import torch

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(f"bench_rl: {args.group}/{args.run} on {name}, {args.iterations} timed iterations after {args.warmup} warm-up")
    for n, variant in enumerate(["", *args.variant]):
        if n == 0 and args.no_baseline:
            continue
        label = variant or "the profile's settings"
        trace = args.trace / f"{args.group}-{args.run}-{n}.json" if args.trace else None
        alone = time_iterations(args.group, args.run, args.iterations, args.warmup, args.profile, variant, trace=trace)
        profile = alone.pop("profile", None)
        print(f"[{label}] one process alone, seconds per iteration: "
              + ", ".join(f"{k} {v:.3f}" for k, v in alone.items()))
        if profile:
            print(profile)
        base = 1.0 / alone["wall_per_iteration"]
        for workers in args.workers:
            results = concurrent(args.group, args.run, args.iterations, workers, variant, args.warmup)
            per_iteration = statistics.mean(r["wall_per_iteration"] for r in results)
            throughput = workers / per_iteration
            phases = ", ".join(f"{k} {statistics.mean(r[k] for r in results):.3f}"
                               for k in ("generation", "scoring", "update", "warmup_seconds"))
            print(f"[{label}] {workers:>2} processes: {per_iteration:.3f} s per iteration each ({phases}); "
                  f"throughput {throughput:.2f} it/s = {throughput / base:.2f}x one process of this setting")


if __name__ == "__main__":
    main()
