"""DVC stage `evaluate`: pass@k on the math test problems (the paper's Fig. 5) of every model named in params.

The models come from `evaluation.models` (name -> folder under outputs/<profile>/, "{seed}" standing for each of
the training seeds: the top-level `seeds` that the train stage also reads): the base math model, the PPO model, and
each CORY agent used alone with the pioneer prompt. Every folder is a plain `save_pretrained` model + tokenizer.
Outputs, under outputs/<profile>/eval/:

- passk.json (DVC metrics): {model: {"seeds": {seed: {k: pass@k}}, "mean": {k: ...}, "std": {k: ...}}}, mean and
  population std (ddof 0) over seeds; a folder without "{seed}" is evaluated once, under the seed key "none".
- details.json: {model: {seed: {"correct": per-problem correct counts, "mean_response_length", "samples"}}}.

With `evaluation.authors_protocol.enabled`, each model's entry of passk.json also holds "authors_protocol":
{"seeds": {seed: {k: accuracy}}, "mean": ..., "std": ...}, the authors' GSM8K accuracy (any of k samples correct,
cory.tasks.evaluation.evaluate_authors_protocol), beside the unbiased pass@k whose keys stay as they are; each run's
details.json entry holds its "authors_protocol" details (per-problem 0/1 per k, the EOS rate, samples).

The model runs are evaluated at once, `runtime.workers` processes per GPU over every visible GPU, as the train stage
trains its runs (each run's sampling is seeded alike, so the numbers do not depend on it); each run's evaluation and
their summary over seeds are cory.tasks.evaluation's.
"""

from __future__ import annotations

import time
from pathlib import Path

from cory.schema import to_dict
from cory.tasks.evaluation import AUTHORS, evaluate_folder, over_seeds
from cory.tracking.runs import FinishedRun, log_finished
from cory.tracking.store import warm_up
from pipeline.common import device, read_jsonl, require_device, run_stage, stage_timer, write_json
from pipeline.params import evaluation_seeds, load_params
from pipeline.paths import out_dir
from pipeline.gpus import deterministic_kernels, processes_at_once, run_at_once, visible_gpus
from pipeline.sections import EvaluateConfig, RuntimeConfig
from pipeline.single_writer import stage_lock

UNSEEDED = "none"
"""Seed key of a model folder without "{seed}" (e.g. the base model, trained once)."""


def model_runs(cfg: EvaluateConfig, seeds: list[int], root: Path) -> list[tuple[str, str, Path]]:
    """(model name, seed key, folder) of every model run to evaluate, in params order."""
    runs = []
    for name, folder in cfg.models.items():
        if "{seed}" in folder:
            runs += [(name, str(seed), root / folder.format(seed=seed)) for seed in seeds]
        else:
            runs.append((name, UNSEEDED, root / folder))
    return runs


def check_model_folders(runs: list[tuple[str, str, Path]]) -> None:
    """One error listing every model folder that is missing or lacks a model config or tokenizer."""
    problems = [
        f"  {name} (seed {seed}): {folder}"
        for name, seed, folder in runs
        if not ((folder / "config.json").is_file() and (folder / "tokenizer_config.json").is_file())
    ]
    if problems:
        raise FileNotFoundError(
            "evaluation.models: these model folders are missing or lack config.json/tokenizer_config.json "
            "(did their training stage run? is the path right?):\n" + "\n".join(problems)
        )


def load_problems(path: Path, n_problems: int | None) -> tuple[list[str], list[str]]:
    """The first `n_problems` (question, answer) pairs of a .jsonl file (all of them if None)."""
    rows = read_jsonl(path)
    for i, row in enumerate(rows, 1):
        if not (isinstance(row.get("question"), str) and isinstance(row.get("answer"), str)):
            raise ValueError(f"{path}:{i}: each row needs string fields question and answer, got {sorted(row)}")
    if n_problems is not None and n_problems > len(rows):
        raise ValueError(f"evaluation.n_problems: {n_problems} requested but {path} has only {len(rows)} problems")
    rows = rows[:n_problems]
    return [row["question"] for row in rows], [row["answer"] for row in rows]


def passk_metrics(passk: dict, k: int) -> dict[str, float]:
    """The MLflow metrics of one k: each model's mean over seeds and each seeded run (glossary: eval/...)."""
    metrics = {}
    for name, result in passk.items():
        metrics[f"eval/{name}/pass_at_k"] = result["mean"][k]
        for seed, run in result["seeds"].items():
            if seed != UNSEEDED:  # an unseeded model's one run is its mean
                metrics[f"eval/{name}/seed{seed}/pass_at_k"] = run[k]
    return metrics


def prepare(
    cfg: EvaluateConfig, seeds: list[int], test_path: Path, root: Path
) -> tuple[list[tuple[str, str, Path]], list[str], list[str]]:
    """Check every input before any model is loaded: (model runs, questions, answers)."""
    runs = model_runs(cfg, seeds, root)
    check_model_folders(runs)
    questions, answers = load_problems(test_path, cfg.n_problems)
    return runs, questions, answers


def evaluate_one(name: str, seed: str, folder: Path, cfg: EvaluateConfig, questions: list[str], answers: list[str],
                 on: str) -> tuple[str, str, dict]:
    """Pass@k of one model run: (name, seed key, its result as cory.tasks.evaluation.evaluate_folder gives it). Runs in
    a worker process of its own where the runs are evaluated at once; the sampling is seeded per run
    (evaluation.seed), so either way gives the same numbers."""
    start = time.perf_counter()
    result = evaluate_folder(folder, cfg, cfg.prompt_template, questions, answers, on)
    shown = ", ".join(f"pass@{k} {v:.3f}" for k, v in result["pass_at_k"].items())
    if AUTHORS in result:
        shown += "; the authors' " + ", ".join(f"@{k} {v:.3f}" for k, v in result[AUTHORS]["accuracy"].items())
    print(f"evaluate: {name} seed {seed}: {shown} ({time.perf_counter() - start:.1f}s)", flush=True)
    return name, seed, result


def processes_for(runs: list, on: str, runtime: RuntimeConfig | None) -> int:
    """How many processes evaluate `runs` at once (see `evaluate`)."""
    gpus = visible_gpus() if on == "cuda" and runtime is not None else []
    return 1 if runtime is None else min(len(runs), processes_at_once(runtime.workers, gpus))


def evaluate(
    cfg: EvaluateConfig, runs: list[tuple[str, str, Path]], questions: list[str], answers: list[str], on: str,
    runtime: RuntimeConfig | None = None,
) -> tuple[dict, dict]:
    """Pass@k of every model run on the problems; returns (passk, details) as documented above. With a `runtime`,
    the runs go at once as the train stage runs its runs: `runtime.workers` processes per visible GPU (under an MPS
    daemon where several share one: runtime.mps), or `workers` in all without a GPU; else, or where that is one
    process, one after another here."""
    gpus = visible_gpus() if on == "cuda" and runtime is not None else []
    processes = processes_for(runs, on, runtime)
    if processes > 1:
        calls = {f"{name} seed {seed}": (evaluate_one, (name, seed, folder, cfg, questions, answers, on))
                 for name, seed, folder in runs}
        results, failed = run_at_once(calls, processes, gpus, runtime.mps, "evaluate")
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(runs)} model runs failed to evaluate:\n"
                               + "\n".join(f"  {run}: {error}" for run, error in sorted(failed.items())))
    else:
        results = [evaluate_one(name, seed, folder, cfg, questions, answers, on) for name, seed, folder in runs]
    # in params order, whichever ended first
    by_run = {(name, seed): result for name, seed, result in results}
    return over_seeds([(name, seed) for name, seed, _ in runs], by_run)


def main() -> None:
    params = load_params()
    require_device(params)
    deterministic_kernels(params.runtime.deterministic)
    with stage_lock(params, "evaluate"), stage_timer(params, "evaluate"):  # one writer (pipeline.single_writer)
        cfg = params.evaluation
        eval_dir = out_dir(params, "eval")
        test_path = out_dir(params, "data", "math", "test.jsonl")
        seeds = evaluation_seeds(params)  # the seeds of the group the models come from, substituted for "{seed}"
        runs, questions, answers = prepare(cfg, seeds, test_path, out_dir(params))
        runtime = params.runtime
        # The stage's MLflow run is logged once the models are evaluated; where worker processes evaluate them, this
        # process imports MLflow and opens the store meanwhile (warm_up), instead of before they start.
        run = FinishedRun("evaluate", {**to_dict(cfg), "seeds": seeds}, str(eval_dir), time.time(), 0.0)
        if processes_for(runs, device(), runtime) > 1:
            warm_up(params.profile)
        try:
            passk, details = evaluate(cfg, runs, questions, answers, device(), runtime)
        except BaseException as exc:
            run.status = "KILLED" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "FAILED"
            run.ended_at = time.time()
            log_finished(run, params.profile)
            raise
        write_json(eval_dir / "passk.json", passk)
        write_json(eval_dir / "details.json", details)
        # step = k, so MLflow draws each model's pass@k curve (Fig. 5) as a metric history
        run.steps = [(k, passk_metrics(passk, k)) for k in cfg.ks]
        run.artifacts, run.ended_at = [str(eval_dir / "passk.json")], time.time()
        log_finished(run, params.profile)


if __name__ == "__main__":
    run_stage(main)
