"""Benchmark: where an RL iteration's time, launches and memory go, and how many runs should share one GPU.

    python -m benchmark.rl [--group imdb --run cory [ppo ...]] [--iterations 6] [--warmup 2] [--profile]
                           [--variant ppo.speed.compile=regional ...] [--no-baseline] [--workers 1 4 8 14] [--mps]
                           [--trace DIR] [--peak-flops 989e12] [--checkpoint] [--out FILE]  (from the project root)

Builds each run of the profile (params.yaml or $CORY_PARAMS: its resolved train config, model shape and prompt
template) on randomly initialised models of the same shapes (the time of a step does not depend on the weights, and
no pipeline stage has to run first): a model the pipeline trains from scratch at its params' shape, a model it loads
(base_models.smollm2: SmolLM2-135M's GGUF) at its known architecture (benchmark.common.RANDOM_MODELS) with a word-level
stand-in tokenizer, so that it needs no file beyond torch and transformers. Then, for each run and each variant (the
profile's settings first, then each --variant: comma-separated dotted KEY=VALUE train settings, values read as YAML),
in a process of its own, one after another (each its own compilations, caches and peak memory):
  - one process alone: seconds per iteration, split into generation / scoring / experience / epochs (the PPO epochs:
    benchmark.phases), the peak GPU memory of the whole process (max_memory_allocated: the models, the optimizer,
    every pass), the model FLOPs of each phase and its MFU against --peak-flops (the phase's FLOP floor over its
    seconds), the warm-up's seconds (compilations) and what dynamo compiled (graphs, breaks, graphs while timed);
  - with --profile: one more iteration under torch.profiler, its CUDA kernels, launch calls and GPU-busy time per
    phase (on a CPU: the aten operators that launch work), and the tables of the most GPU and host time; with
    --trace DIR also its Chrome trace (DIR/<group>-<run>-<n>.json, n the variant's index);
  - with --checkpoint: the seconds and size of one resume checkpoint of the first variant's trainer, as a run
    writes it (the variants' checkpoints are alike);
  - with --workers: N processes training at once on the GPU, as the train stage runs them, and the throughput
    (iterations per second over all of them) relative to one process, measured side by side in this one run.
Last, per run, a table of the variants side by side; with --out, every number as JSON. It needs a GPU to say anything
useful about speed (on a CPU it runs, slowly).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmark.common import (RANDOM_MODELS, CompileCount, first_seed_job, queries_of,
                              random_llama, with_settings, word_tokenizer)
from benchmark.phases import (PHASES, Phases, held_memory, iteration_flops, matmul_weights, profile_cpu_kernels,
                              profile_phases)
from cory.schema import dotted_tree


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
    from cory.tasks.tokenizer import scratch_tokenizer
    from pipeline.common import device
    from pipeline.params import SCRATCH, load_params

    params = load_params()  # params.yaml, or $CORY_PARAMS
    job = first_seed_job(params, group, run)
    if job is None:
        raise ValueError(f"the params have no run {group}/{run}")
    task = job.task
    train = with_settings(job.train, dotted_tree(variant.split(",")))  # over the group's own settings too
    base = params.base_models[job.model]
    if base.source == SCRATCH:
        texts = []
        if base.tokenizer == CORPUS_VOCABULARY:  # the generated problems stand in for the stage's prepared corpus
            from cory.tasks.mathgen import generate_problems, pretraining_texts

            problems = generate_problems(params.data.math.generator)["pretrain"]
            texts = pretraining_texts(problems, slip_rate=base.slip_rate)
        tokenizer = scratch_tokenizer(base, texts)  # the base-model stage's choice
        lm = build_causal_lm(base.lm, len(tokenizer), tokenizer.eos_token_id).to(device())
        reward_shape = base.lm
    elif job.model in RANDOM_MODELS:
        shape = RANDOM_MODELS[job.model]
        tokenizer = word_tokenizer(shape["vocab_size"])
        lm = random_llama(shape, tokenizer.eos_token_id).to(device())
        reward_shape = params.base_models[params.reward_model.init_from].lm  # the classifier the stage trains
    else:
        raise ValueError(f"{group}/{run}: base model {job.model!r} is loaded from its source, whose shape the "
                         f"benchmark does not know (it knows {', '.join(RANDOM_MODELS)})")
    if task.reward == "sentiment":
        classifier = build_classifier(tokenizer, ClassifierConfig(lm=reward_shape))
        save_model(classifier, tokenizer, work / "reward")
        reward = build_reward("sentiment", model_name_or_path=str(work / "reward"), device=device())
    else:
        reward = build_reward("math")
    queries, answers = queries_of(task.reward, train.ppo.queries_per_batch)
    return train, lm, tokenizer, reward, queries, answers


def time_iterations(group: str, run: str, iterations: int, warmup: int = 2, profile: bool = False,
                    variant: str = "", barrier=None, trace: Path | None = None,
                    peak_flops: float = 989e12, checkpoint: bool = False) -> dict:
    """Train `warmup + iterations` iterations; returns mean seconds per iteration and per phase (after warmup), the
    process's peak GPU memory, FLOPs and MFU per phase, the trainer's build and the warm-up's seconds and what dynamo
    compiled; with `profile` one more iteration's launches and GPU time per phase (benchmark.phases); with
    `checkpoint` the seconds of one resume checkpoint of the trainer (cory.rl.checkpoint, as a run saves it)."""
    import torch

    from cory.rl.trainer import Trainer

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    elif profile:
        profile_cpu_kernels()
    with tempfile.TemporaryDirectory() as tmp:
        cfg, lm, tokenizer, reward, prompts, answers = build(group, run, Path(tmp), variant)
        start = time.perf_counter()
        trainer = Trainer(replace(cfg, samples_to_log=0), lm, tokenizer, reward, seed=0)
        build_seconds = time.perf_counter() - start  # the copies: reference, agents, bf16 copies, optimizers
        phases = Phases(trainer)
        try:
            return _timed(trainer, phases, prompts, answers, cfg, iterations, warmup, profile, barrier, trace,
                          peak_flops, Path(tmp) / "resume" if checkpoint else None, build_seconds)
        finally:
            phases.close()


def _timed(trainer, phases: Phases, prompts, answers, cfg, iterations: int, warmup: int, profile: bool, barrier,
           trace: Path | None, peak_flops: float, checkpoint: Path | None, build_seconds: float) -> dict:
    """time_iterations' measurements of a built trainer with `phases` installed (`checkpoint`: where to save one)."""
    weights = matmul_weights(trainer.agents[0].lm.config)
    compiled = CompileCount()
    if barrier is not None:
        barrier.wait()  # every process has built its models: time only the training
    start = time.perf_counter()
    for _ in range(warmup):
        trainer.step(prompts, answers)
    warmup_seconds = time.perf_counter() - start
    if barrier is not None:
        # and every process is past its warm-up (compilations take each a different time): the timed iterations run
        # side by side, not beside another process's compilation
        barrier.wait()
    compiled.timing_starts()
    rows, flops = [], []
    start = time.perf_counter()
    for _ in range(iterations):
        phases.start_iteration()
        rows.append(phases.seconds(trainer.step(prompts, answers)))
        flops.append(iteration_flops(weights, phases.sequences, cfg.ppo.ppo_epochs))
    wall = time.perf_counter() - start
    result = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
    result["wall_per_iteration"] = wall / iterations
    result["median_iteration"] = statistics.median(r["iteration"] for r in rows)  # a stray recompile aside
    result["warmup_seconds"] = warmup_seconds  # includes any compilation
    result["build_seconds"] = build_seconds
    result["peak_gib"] = phases.process_peak_gib()  # from the process's start: models, optimizer, every pass
    result["phase_peak_gib"] = phases.peak_gib
    result["held_gib"] = held_memory(trainer)
    result["flops"] = {p: statistics.mean(f[p] for f in flops) for p in PHASES}
    result["flops"]["iteration"] = sum(result["flops"].values())
    result["mfu"] = {p: result["flops"][p] / result[p] / peak_flops for p in (*PHASES, "iteration") if result[p]}
    result["floor_seconds"] = result["flops"]["iteration"] / peak_flops
    result.update(compiled.fields())
    if profile:
        phases.start_iteration()
        result["profile"], result["profile_tables"] = profile_phases(lambda: trainer.step(prompts, answers), trace)
        # a shape the timed iterations did not meet compiles in the profiled one, and its operators count there
        result["graphs_compiled_while_profiled"] = (compiled.fields()["graphs_compiled_while_timed"]
                                                    - result["graphs_compiled_while_timed"])
    if checkpoint:
        from cory.rl.checkpoint import save_checkpoint

        start = time.perf_counter()
        folder = save_checkpoint(checkpoint, trainer, {"seconds": 0.0})
        result["checkpoint_seconds"] = time.perf_counter() - start
        result["checkpoint_gib"] = sum(f.stat().st_size for f in folder.iterdir()) / 2**30
    return result


def _alone(args):
    return time_iterations(*args)


def alone(group: str, run: str, iterations: int, warmup: int, profile: bool, variant: str, trace: Path | None,
          peak_flops: float, checkpoint: bool = False) -> dict:
    """`time_iterations` in a fresh process (its own compilations, caches and peak memory); a failure is its error."""
    context = multiprocessing.get_context("spawn")
    try:
        with context.Pool(1) as pool:
            return pool.apply(_alone, [(group, run, iterations, warmup, profile, variant, None, trace, peak_flops,
                                        checkpoint)])
    except Exception as exc:  # noqa: BLE001 - one variant that fails (a compilation, memory) leaves the others
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"}


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


def side_by_side(results: dict[str, dict]) -> str:
    """One row per variant: seconds per iteration and per phase, launches per phase (profiled), peak memory, MFU."""
    head = ["variant", "s/it", *PHASES, "launches g/s/x/e", "kernels g/s/x/e", "peak GiB", "MFU", "floor s",
            "warm-up s", "graphs/breaks/while timed/profiled"]
    rows = []
    for label, r in results.items():
        if "error" in r:
            rows.append([label, "failed: " + r["error"][:80]] + [""] * (len(head) - 2))
            continue
        prof = r.get("profile") or {}
        per_phase = {key: "/".join(str(prof[key][p]) for p in PHASES) if key in prof else "-"
                     for key in ("launches", "kernels", "operators")}
        launches = per_phase["launches"] if "launches" in prof else per_phase["operators"] + " (ops)" if prof else "-"
        rows.append([label, f"{r['iteration']:.3f}", *(f"{r[p]:.3f}" for p in PHASES), launches,
                     per_phase["kernels"], "-" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}",
                     f"{100 * r['mfu'].get('iteration', 0):.1f}%", f"{r['floor_seconds']:.3f}",
                     f"{r['warmup_seconds']:.1f}",
                     f"{r['compiled_graphs']}/{r['graph_breaks']}/{r['graphs_compiled_while_timed']}/"
                     f"{r.get('graphs_compiled_while_profiled', '-')}"])
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group", default="imdb")
    parser.add_argument("--run", nargs="+", default=["cory"])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--workers", type=int, nargs="*", default=[])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-baseline", action="store_true", help="time the variants only")
    parser.add_argument("--mps", action="store_true",
                        help="run everything under a CUDA MPS daemon, as the train stage does with runtime.mps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first (compilation happens here)")
    parser.add_argument("--trace", type=Path, help="with --profile: write each variant's Chrome trace here")
    parser.add_argument("--variant", action="append", default=[], help="e.g. ppo.speed.mixed_precision=false")
    parser.add_argument("--peak-flops", type=float, default=989e12,
                        help="FLOP/s the MFU is of (default: an H100 SXM's dense bf16 peak)")
    parser.add_argument("--checkpoint", action="store_true",
                        help="also time one resume checkpoint of the first variant's trainer, as a run writes it")
    parser.add_argument("--out", type=Path, help="every number as JSON here")
    args = parser.parse_args()

    from pipeline.gpus import mps_daemon, visible_gpus, worker_gpus

    with mps_daemon(args.mps) as under_mps:  # started before this process's CUDA context, so that it is a client too
        if under_mps and "CUDA_VISIBLE_DEVICES" in os.environ:  # its clients name its GPUs by position (worker_gpus)
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(worker_gpus(visible_gpus(), True))
        run(args)


def run(args: argparse.Namespace) -> None:
    import torch
    import transformers

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(f"bench_rl: {args.group}/{' '.join(args.run)} on {name}, {args.iterations} timed iterations after "
          f"{args.warmup} warm-up, each variant in a process of its own", flush=True)
    report = {"device": name, "torch": torch.__version__, "transformers": transformers.__version__,
              "group": args.group, "iterations": args.iterations, "warmup": args.warmup, "peak_flops": args.peak_flops,
              "runs": {}}
    variants = [v for n, v in enumerate(["", *args.variant]) if n or not args.no_baseline]
    for run_name in args.run:
        results = report["runs"].setdefault(run_name, {})
        for variant in variants:
            n = ["", *args.variant].index(variant)
            label = variant or "the profile's settings"
            trace = args.trace / f"{args.group}-{run_name}-{n}.json" if args.trace else None
            alone_result = alone(args.group, run_name, args.iterations, args.warmup, args.profile, variant, trace,
                                 args.peak_flops, args.checkpoint and variant == variants[0])
            results[label] = alone_result
            if "error" in alone_result:
                print(f"[{run_name}: {label}] failed: {alone_result['error']}", flush=True)
                continue
            tables = alone_result.pop("profile_tables", None)
            print(f"[{run_name}: {label}] one process alone, seconds per iteration: "
                  + ", ".join(f"{k} {alone_result[k]:.3f}" for k in (*PHASES, "iteration", "median_iteration",
                                                                      "wall_per_iteration", "build_seconds",
                                                                      "warmup_seconds", "checkpoint_seconds")
                              if k in alone_result)
                  + f"; peak {alone_result['peak_gib'] or 0:.2f} GiB; MFU "
                  + ", ".join(f"{k} {100 * v:.1f}%" for k, v in alone_result["mfu"].items()), flush=True)
            print(f"[{run_name}: {label}] held between iterations (GiB): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in alone_result["held_gib"].items())
                  + "; peak per phase (GiB): " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                          alone_result["phase_peak_gib"].items()), flush=True)
            if tables:
                print(f"[{run_name}: {label}] per phase: {json.dumps(alone_result['profile'])}\n{tables}", flush=True)
            base = 1.0 / alone_result["wall_per_iteration"]
            for workers in args.workers:
                timings = concurrent(args.group, run_name, args.iterations, workers, variant, args.warmup)
                per_iteration = statistics.mean(r["wall_per_iteration"] for r in timings)
                throughput = workers / per_iteration
                phases = ", ".join(f"{k} {statistics.mean(r[k] for r in timings):.3f}"
                                   for k in (*PHASES, "warmup_seconds"))
                print(f"[{run_name}: {label}] {workers:>2} processes: {per_iteration:.3f} s per iteration each "
                      f"({phases}); throughput {throughput:.2f} it/s = {throughput / base:.2f}x one process of this "
                      "setting", flush=True)
                alone_result.setdefault("workers", {})[workers] = {"per_iteration": per_iteration,
                                                                   "throughput": throughput}
            if args.out:  # after each variant: what a cut-short call measured stays
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nbench_rl: {args.group}/{run_name} side by side (phases g/s/x/e: generation, scoring, experience, "
              f"epochs; MFU of {args.peak_flops:.3g} FLOP/s)\n{side_by_side(results)}\n", flush=True)


if __name__ == "__main__":
    main()
