"""What each run of a large profile costs: seconds per iteration (generation / scoring / update), parameters and peak
GPU memory, and the projected wall time of the whole profile (docs/scale.md).

    python -m tools.build_standins --profile paper_standins --offline-data --device cuda   # the paper's shapes
    python -m pipeline.profile paper_standins
    python -m benchmark.paper [--iterations 3] [--only math/cory ...] [--set ppo.batch_size=8 ...] [--profile]
                                  [--out reports/paper/scale.json]
    python -m benchmark.paper --combine A.json B.json ... [--out ...]   # merge earlier measurements (no GPU)

For every run of every experiment group of the params (one eta of a sweep stands for all of them: the coefficient does
not change the cost), each in a process of its own, it loads the run's base model as its `base_models.<name>.source`
names it (a stand-in folder, a hub name, or a GGUF file, converted as the base_models stage converts it; no pipeline
stage runs first) and the reward model likewise, builds the run's Trainer with its resolved train config, and times
`--iterations` iterations after one warm-up iteration on queries of the task's kind (IMDB-like word openings; math
problems from cory.tasks.mathgen with 1-token gold answers). Random weights rarely end an answer early, so every
response runs to its drawn length: an upper bound on a trained model's time.

The JSON written to --out holds, per run: model, parameters (total, trainable), batch size, seconds per iteration
and its split, peak GPU memory, its start (loading the models, and what the warm-up iterations took beyond warm ones:
compiling); and the projection: every run x its seeds (x the etas of a sweep) x train.iterations, one after another
(runtime.workers 1, as the paper profile has it), and the same with each run's start once per run x seed (x eta).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmark.common import CompileCount, profile_iteration, queries_of, with_settings
from cory.schema import dotted_tree
from cory.tasks.config import GGUF


def plan(params, only: list[str]) -> list[tuple[str, str, object]]:
    """(group, run, job) for the first seed of each run (of one eta per sweep), in params order (`params`: the typed
    tree, pipeline.params.Params)."""
    chosen = []
    for group, exp in params.experiments.items():
        seeds = exp.seeds_of(params.seeds)
        seen = set()
        for job in params.jobs[group]:
            run = job.run.split("_eta")[0] if exp.sweep_eta else job.run
            if job.seed != seeds[0] or run in seen or (only and f"{group}/{run}" not in only):
                continue
            seen.add(run)
            chosen.append((group, run, job))
    return chosen


def source_of(params, name: str | None) -> str | None:
    """A base model or `reward` as its params source names it (a folder or a hub name; a GGUF file's name for a model
    converted from one)."""
    if name is None:
        return None
    if name == "reward":
        return params.reward_model.source
    if name not in params.base_models:
        return name
    cfg = params.base_models[name]
    return cfg.gguf.file if cfg.source == GGUF else cfg.source


def model_folder(params, name: str, folder: Path) -> str:
    """Where to load base model `name` from: its source, or for a GGUF source the model converted from its file (as the
    base_models stage converts it, pipeline.base_models) and saved in `folder`."""
    cfg = params.base_models.get(name)
    if cfg is None or cfg.source != GGUF:
        return source_of(params, name)
    from cory.hf import save_model
    from cory.tasks.gguf import load_gguf_model

    save_model(*load_gguf_model(name, cfg), folder)
    return str(folder)


def load_run(job, params, overrides: dict, device: str):
    """(Trainer, its base model's parameter count, seconds spent converting a GGUF model) of one run: its base model
    loaded as its `source` names it, its reward model likewise, its resolved train config with `overrides` (a nested
    dict of train settings) over it. The conversion is the base_models stage's work, once, not a run's."""
    import torch

    from cory.runs.run import load_lm
    from cory.tasks.rewards import build_reward
    from cory.tasks.tokenizer import load_tokenizer
    from cory.rl.trainer import Trainer

    train = with_settings(job.train, overrides)
    with tempfile.TemporaryDirectory(prefix="bench_model_") as scratch:  # a converted model's folder, while it loads
        started = time.perf_counter()
        model = model_folder(params, job.model, Path(scratch))  # converts a GGUF file; else returns at once
        converting = time.perf_counter() - started
        torch.manual_seed(0)
        lm = load_lm(model, device, train.load_in_4bit)
        tokenizer = load_tokenizer(model)
    total = sum(p.numel() for p in lm.parameters())
    if job.task.reward == "sentiment":
        reward = build_reward("sentiment", model_name_or_path=source_of(params, job.task.reward_model), device=device)
    else:
        reward = build_reward("math")
    return Trainer(train, lm, tokenizer, reward, seed=0), total, converting


def measure(job, params, iterations: int, overrides: dict, device: str, profile: bool = False,
            warmup: int = 1) -> dict:
    import torch

    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    compiled = CompileCount()
    started = time.perf_counter()
    trainer, total, converting = load_run(job, params, overrides, device)
    load_seconds = time.perf_counter() - started - converting
    train, model = trainer.cfg, source_of(params, job.model)
    trainable = sum(p.numel() for agent in trainer.agents for p in agent.parameters())
    queries, answers = queries_of(job.task.reward, train.ppo.queries_per_batch)
    timings, warmup_seconds = [], 0.0
    for it in range(warmup + iterations):  # warm-up first (allocator, kernels, compilation)
        if it == warmup:
            compiled.timing_starts()
        metrics = trainer.step(queries, answers)
        if it >= warmup:
            timings.append({k.removeprefix("timing/"): v for k, v in metrics.items() if k.startswith("timing/")})
        else:
            warmup_seconds += metrics["timing/iteration"]
    seconds = {k: statistics.mean(t[k] for t in timings) for k in timings[0]}
    # what a run pays once: loading its models, and what its first iterations take beyond a warm one (compiling the
    # decoding step and the passes, the allocator's first blocks)
    startup = load_seconds + max(0.0, warmup_seconds - warmup * seconds["iteration"])
    if profile and device == "cuda":  # one more iteration under the profiler, printed (not in the JSON)
        print(profile_iteration(lambda: trainer.step(queries, answers), seconds["iteration"]), flush=True)
    return {**cost_fields(model, train), "params_total": total, "params_trainable": trainable,
            "iterations_timed": iterations, "warmup_iterations": warmup, "seconds_per_iteration": seconds["iteration"],
            "split": {k: v for k, v in seconds.items() if k != "iteration"}, "startup_seconds": startup,
            "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
            "train_iterations": train.iterations,
            # what the run compiled (speed.compile, the decoding step, the vocabulary passes)
            **compiled.fields()}


def measure_apart(*args) -> dict:
    """`measure(*args)` in a process of its own, so that each run starts on an empty GPU: a run's compiled decoding
    steps (and their CUDA graphs' memory pools) keep its model alive in the process that ran it, which ran the 7B CORY
    run out of an 80 GB GPU after the 7B PPO run in one process, where alone it takes 66 GiB (docs/scale.md)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measure, *args).result()


def cost_fields(model: str, train) -> dict:
    """What an iteration's cost depends on: the model, the agents and the shapes (not the KL coefficient, the
    partner-reward coefficient or role exchange, which change no tensor's size). Every measurement records them."""
    ppo = train.ppo
    return {"model": model, "n_agents": train.cory.n_agents, "lora_rank": train.lora_rank,
            "load_in_4bit": train.load_in_4bit, "batch_size": ppo.batch_size, "mini_batch_size": ppo.mini_batch_size,
            "gradient_accumulation_steps": ppo.gradient_accumulation_steps, "samples_per_query": ppo.samples_per_query,
            "response_length": list(ppo.generation.response_length)}


def shape(fields: dict, result: dict) -> dict | None:
    """`result`'s values of the cost `fields`, the model named by its last path part (a stand-in folder,
    standins/gpt2-large, has its hub model's shapes); None where the result lacks one (an older file, an error)."""
    if "error" in result or any(key not in result for key in fields):
        return None
    return {key: Path(result[key]).name if key == "model" else result[key] for key in fields}


def combine(params, files: list[str], only: list[str]) -> dict[str, dict]:
    """Every run of the params from earlier bench files, without measuring. A run is taken from the LAST file that
    measured anything of its cost fields (later files measure the later code and settings, e.g. a speed option the
    cost fields do not name): that file's measurement of the run itself, else of another run with those fields,
    marked `estimated_from`. A run none of them matches is left out."""
    measured = []  # (file index, key, result) in file order
    for index, path in enumerate(files):
        data = json.loads(Path(path).read_text())
        measured += [(index, key, {**result, "device": data["device"], "source": path})
                     for key, result in data["runs"].items()]
    runs = {}
    for group, run, job in plan(params, only):
        key, fields = f"{group}/{run}", cost_fields(source_of(params, job.model), job.train)
        want = shape(fields, fields)
        same = [(i, k, r) for i, k, r in measured if shape(fields, r) == want]
        if not same:
            continue
        latest = [(k, r) for i, k, r in same if i == same[-1][0]]
        exact = [r for k, r in latest if k == key]
        runs[key] = exact[-1] if exact else {**latest[-1][1], "estimated_from": latest[-1][0]}
        runs[key]["train_iterations"] = job.train.iterations  # per-iteration cost does not depend on it
    return runs


def projection(params, runs: dict[str, dict]) -> dict:
    """Wall time of every run x seed (x eta) x train.iterations, one after another; and with each run's start
    (`startup_seconds`: loading, compiling) once per run x seed (x eta), where every run measured it (files written
    before it was measured lack it: `startup_not_measured`)."""
    total, parts, startup, lacking = 0.0, {}, 0.0, []
    for key, result in runs.items():
        exp = params.experiments[key.split("/")[0]]
        repeats = len(exp.seeds_of(params.seeds)) * max(1, len(exp.sweep_eta))
        parts[key] = repeats * result["train_iterations"] * result["seconds_per_iteration"]
        total += parts[key]
        if "startup_seconds" in result:
            startup += repeats * result["startup_seconds"]
        else:
            lacking.append(key)
    with_startup = None if lacking else (total + startup) / 3600
    return {"seconds": total, "hours": total / 3600, "per_run_seconds": parts, "startup_seconds": startup,
            "hours_with_startup": with_startup, "startup_not_measured": lacking,
            "assumes": "runs one after another (runtime.workers 1), every response at its drawn length"}


def projected(p: dict) -> str:
    """A projection in words: its hours, then with the runs' starts where each run measured its own."""
    starts = (f"{p['hours_with_startup']:.1f} h with each run's start" if p["hours_with_startup"] is not None else
              f"the start not measured for {len(p['startup_not_measured'])} of them")
    return f"projected {p['hours']:.1f} h ({starts})"


def main(argv: list[str]) -> None:
    import torch

    from pipeline.params import load_params

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations per run (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed iterations first (a static cache's compilations need 2)")
    parser.add_argument("--only", nargs="*", default=[], help="GROUP/RUN names (default: every run)")
    parser.add_argument("--set", action="append", default=[], help="a train setting for every run, e.g. ppo.batch_size=8")
    parser.add_argument("--out", default=None, help="default: reports/<profile>/scale.json")
    parser.add_argument("--profile", action="store_true",
                        help="after each run's timed iterations, one more under torch.profiler: its top kernels and "
                             "host operators")
    parser.add_argument("--combine", nargs="+", default=None, metavar="JSON",
                        help="measure nothing: take every run of the params from these bench files (see combine())")
    args = parser.parse_args(argv)
    params = load_params()
    out = Path(args.out or f"reports/{params.profile}/scale.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.combine:
        runs = combine(params, args.combine, args.only)
        missing = [f"{g}/{r}" for g, r, _ in plan(params, args.only) if f"{g}/{r}" not in runs]
        result = {"profile": params.profile, "combined_from": args.combine, "runs": runs,
                  "projection": projection(params, runs), "not_measured": missing}
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"bench_paper: {len(runs)} runs ({sum('estimated_from' in r for r in runs.values())} estimated from a "
              f"run of the same shape), {len(missing)} not measured; {projected(result['projection'])}; "
              f"wrote {out}")
        return
    overrides = dotted_tree(args.set)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    runs: dict[str, dict] = {}
    chosen = plan(params, args.only)
    if not chosen:
        raise SystemExit(f"bench_paper: no run of the params matches --only {' '.join(args.only)}")
    for group, run, job in chosen:
        start = time.perf_counter()
        try:
            r = runs[f"{group}/{run}"] = measure_apart(job, params, args.iterations, overrides, device, args.profile,
                                                       args.warmup)
        except Exception as error:  # one run that cannot run (memory, a missing package) must not hide the others
            runs[f"{group}/{run}"] = {"model": source_of(params, job.model), "error": f"{type(error).__name__}: {error}"}
            print(f"bench_paper: {group}/{run} failed: {type(error).__name__}: {error}", flush=True)
        else:
            peak = f", peak {r['peak_gpu_gib']:.1f} GiB" if r["peak_gpu_gib"] is not None else ""
            print(f"bench_paper: {group}/{run}: {r['seconds_per_iteration']:.2f} s/it "
                  f"({', '.join(f'{k} {v:.2f}' for k, v in r['split'].items())}){peak}, start "
                  f"{r['startup_seconds']:.0f} s; "
                  f"{r['params_total']:,} params, {r['params_trainable']:,} trainable "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
        measured = {key: value for key, value in runs.items() if "error" not in value}
        result = {"profile": params.profile, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                  "overrides": args.set, "runs": runs, "projection": projection(params, measured),
                  "not_measured": sorted(set(runs) - set(measured))}
        out.write_text(json.dumps(result, indent=2) + "\n")  # after every run: a stopped bench keeps what it measured
    print(f"bench_paper: {projected(result['projection'])} for the runs measured "
          f"({len(result['not_measured'])} failed); wrote {out}")
    if result["not_measured"]:
        raise SystemExit(f"bench_paper: {', '.join(result['not_measured'])} failed (see {out})")


if __name__ == "__main__":
    from pipeline.common import run_stage

    run_stage(lambda: main(sys.argv[1:]))
