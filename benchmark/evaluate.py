"""Benchmark: the evaluate stage's model runs one after another, then at once (runtime.workers processes per GPU).

    python -m benchmark.evaluate [--runs 10] [--workers 12] [--mps]          (from the project root)

Saves `--runs` randomly initialised models of the profile's math shape (params.yaml or $CORY_PARAMS: base_models.math,
its tokenizer) to a temporary folder, then times their pass@k (cory.tasks.evaluation.evaluate_folder, gathered by
over_seeds) with the profile's evaluation settings and problems of the task's kind: one after another in this
process, then at once in the stages' worker pool (pipeline.gpus), and says whether every run's pass@k, correct counts
and sample texts came out the same both ways (each run's sampling is seeded: they should). Random weights rarely stop
before evaluation.max_new_tokens, so each run samples longer answers than a trained model does.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def save_models(folder: Path, runs: int) -> list[tuple[str, str, Path]]:
    """`runs` random math models (seeds 0..runs-1) saved with the profile's math tokenizer: the stage's run list."""
    import torch

    from cory.tasks.mathgen import generate_problems, pretraining_texts
    from cory.hf import save_model
    from cory.tasks.pretrain import build_causal_lm
    from cory.tasks.tokenizer import CORPUS_VOCABULARY, scratch_tokenizer
    from pipeline.params import load_params

    params = load_params()
    base = params.base_models["math"]
    texts = []
    if base.tokenizer == CORPUS_VOCABULARY:  # as benchmark/rl.py: the generated problems stand in for the corpus
        problems = generate_problems(params.data.math.generator)["pretrain"]
        texts = pretraining_texts(problems, slip_rate=base.slip_rate)
    tokenizer = scratch_tokenizer(base, texts)
    for seed in range(runs):
        torch.manual_seed(seed)
        save_model(build_causal_lm(base.lm, len(tokenizer), tokenizer.eos_token_id), tokenizer, folder / f"run{seed}")
    return [("random", str(seed), folder / f"run{seed}") for seed in range(runs)]


def evaluate_run(name: str, seed: str, folder: Path, cfg, questions: list[str], answers: list[str], on: str) -> tuple:
    """(name, seed key, pass@k result) of one model run: the pool gives results in the order they end."""
    from cory.tasks.evaluation import evaluate_folder

    return name, seed, evaluate_folder(folder, cfg, cfg.prompt_template, questions, answers, on)


def evaluate(cfg, runs: list[tuple[str, str, Path]], questions: list[str], answers: list[str], on: str,
             workers: int | None = None, mps: bool = False) -> tuple[dict, dict]:
    """(passk, details) of `runs` as the evaluate stage writes them: one after another here, or with `workers`, that
    many processes per visible GPU (in all, without one) at once in the stages' pool."""
    from cory.tasks.evaluation import over_seeds

    calls = {f"{name} seed {seed}": (evaluate_run, (name, seed, folder, cfg, questions, answers, on))
             for name, seed, folder in runs}
    if workers is None:
        ended = [call(*args) for call, args in calls.values()]
    else:
        from pipeline.gpus import processes_at_once, run_at_once, visible_gpus

        gpus = visible_gpus() if on == "cuda" else []
        ended, failed = run_at_once(calls, min(len(runs), processes_at_once(workers, gpus)), gpus, mps,
                                    "bench_evaluate")
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(runs)} model runs failed to evaluate: {failed}")
    return over_seeds([(name, seed) for name, seed, _ in runs], {(name, seed): r for name, seed, r in ended})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="model runs (the default profile evaluates 10)")
    parser.add_argument("--workers", type=int, default=12, help="processes per GPU at once (runtime.workers)")
    parser.add_argument("--mps", action="store_true", help="under a CUDA MPS daemon (runtime.mps)")
    args = parser.parse_args()

    from pipeline.common import device
    from pipeline.params import load_params
    from benchmark.common import queries_of

    params = load_params()
    cfg = params.evaluation
    questions, answers = queries_of("math", cfg.n_problems or 200)
    on = device()
    with tempfile.TemporaryDirectory() as tmp:
        runs = save_models(Path(tmp), args.runs)
        timings, results = {}, {}
        for way, workers in (("one after another", None), (f"at once (runtime.workers {args.workers})", args.workers)):
            start = time.perf_counter()
            results[way] = evaluate(cfg, runs, questions, answers, on, workers, args.mps)
            timings[way] = time.perf_counter() - start
    for way, seconds in timings.items():
        print(f"bench_evaluate: {args.runs} runs of {len(questions)} problems x {cfg.n_samples} samples on {on}, "
              f"{way}: {seconds:.1f} s", flush=True)
    first, second = results.values()
    print(f"bench_evaluate: the same pass@k, correct counts and samples both ways: {first == second}")


if __name__ == "__main__":
    main()
