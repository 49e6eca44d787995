"""Pass@k on math problems (the paper's Fig. 5, CORY.md §4): sample n answers per problem, count the correct ones.

pass@k is the probability that at least one of k answers drawn from the n samples is correct, estimated without bias
as in Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", Eq. 1 and its numerically stable form):

    pass@k = E_problems[ 1 - C(n - c, k) / C(n, k) ],   c = correct samples of the problem.

Sampling is plain: temperature 1, no top-k / top-p filtering, no repetition penalty, unless configured otherwise.

`evaluate_authors_protocol` is the authors' GSM8K evaluation instead (their published code, gsm8k_utils/gsm8k_eval.py):
their prompt, sampler and answer parsing, and pass@k as "any of k samples correct" (cory.tasks.gsm8k_protocol).

`evaluate_folder` evaluates a model saved in a folder, both ways where the settings ask for the authors' protocol;
`over_seeds` gathers the results of several models' runs into each model's mean and spread over its seeds.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import numpy as np
import torch

from cory.rl.rollout import generate, mask_after_eos
from cory.tasks import gsm8k_protocol
from cory.tasks.config import AuthorsProtocolConfig, EvalConfig
from cory.tasks.rewards import MathReward, Reward

AUTHORS = "authors_protocol"
"""The key of the authors' GSM8K protocol's results beside pass@k (`evaluate_folder`, `over_seeds`)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with c correct answers out of n samples (Chen et al. 2021).

    1 - C(n-c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k / i): the product never forms a huge binomial.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}: pass@k needs at least k samples")
    if n - c < k:
        return 1.0  # every k-subset holds a correct answer
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def evaluate_pass_at_k(
    model,
    tokenizer,
    questions: list[str],
    answers: list[str],
    prompt_template: str,
    config: EvalConfig,
    reward: Reward | None = None,
) -> dict:
    """Sample `config.n_samples` answers per question from `model`, score them, and estimate pass@k for each k.

    `prompt_template` turns a question into the prompt (the pioneer prompt of training: "{query}" is the question);
    `reward` scores (questions, responses, gold answers) -> (B,) with 1 for a correct answer (default MathReward).
    Returns {"pass_at_k": {k: mean over problems}, "correct": per-problem counts c, "n_samples", "n_problems",
    "mean_response_length" (tokens, EOS included), "samples": a few generations}.
    """
    if len(questions) != len(answers):
        raise ValueError(f"got {len(questions)} questions and {len(answers)} answers")
    if not questions:
        raise ValueError("no problems to evaluate")
    if "{query}" not in prompt_template:
        raise ValueError(f"prompt_template must contain {{query}}, got {prompt_template!r}")
    reward = reward or MathReward()
    n = config.n_samples

    # Problem-major order: the samples of problem i are rows i*n .. i*n + n-1.
    prompts = [prompt_template.format(query=q) for q in questions for _ in range(n)]
    torch.manual_seed(config.seed)
    rollout = generate(model, tokenizer, prompts, config.generation, config.max_new_tokens, config.batch_size)
    scores = reward(
        [q for q in questions for _ in range(n)], rollout.responses, [a for a in answers for _ in range(n)]
    )  # (P * n,)
    is_correct = (scores > 0.5).view(len(questions), n)  # (P, n); the math reward is 1 or 0
    correct = is_correct.sum(1).tolist()

    return {
        "pass_at_k": {k: float(np.mean([pass_at_k(n, c, k) for c in correct])) for k in config.ks},
        "correct": correct,
        "n_samples": n,
        "n_problems": len(questions),
        "mean_response_length": rollout.response_mask.sum(1).float().mean().item(),
        "samples": [
            {
                "question": questions[i],
                "answer": answers[i],
                "response": rollout.responses[i * n],
                "correct": bool(is_correct[i, 0]),
                "n_correct": correct[i],
            }
            for i in range(min(config.n_examples, len(questions)))
        ],
    }


@contextlib.contextmanager
def seeded_as_the_authors(seed: int):
    """The authors' seed_everything for the duration: python, numpy and torch (every GPU) seeded, cuDNN
    deterministic (and benchmark on, as theirs); the cuDNN flags are set back afterwards."""
    cudnn = torch.backends.cudnn
    flags = cudnn.deterministic, cudnn.benchmark
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    cudnn.deterministic, cudnn.benchmark = True, True
    try:
        yield
    finally:
        cudnn.deterministic, cudnn.benchmark = flags


def evaluate_authors_protocol(
    model, tokenizer, questions: list[str], answers: list[str], config: AuthorsProtocolConfig, batch_size: int,
    n_examples: int = 0,
) -> dict:
    """The authors' GSM8K accuracy of `model` for each k of `config.ks`: k samples per problem in their prompt, each
    `config.max_new_tokens` long (EOS does not end one), a problem correct if any sample's answer is its gold one.

    `answers` are GSM8K worked solutions ("... #### 18"). Returns {"accuracy": {k: fraction of problems},
    "correct": {k: per-problem 0/1}, "eos_rate": share of samples in which EOS was drawn, "samples": the first
    sample of the first `n_examples` problems (of the largest k's draw), with its parsed and gold answers}.
    """
    if len(questions) != len(answers):
        raise ValueError(f"got {len(questions)} questions and {len(answers)} answers")
    if not questions:
        raise ValueError("no problems to evaluate")
    gold = [gsm8k_protocol.gold_answer(a) for a in answers]  # every gold answer checked before any sampling
    eos = tokenizer.eos_token_id

    def draw(k: int) -> tuple[list[list[bool]], list[str], int]:
        """k samples of every problem (problem-major): the (P, k) correctness table, the texts, how many drew EOS."""
        prompts = [gsm8k_protocol.authors_prompt(q) for q in questions for _ in range(k)]
        with seeded_as_the_authors(config.seed):
            rollout = generate(model, tokenizer, prompts, config.generation, config.max_new_tokens, batch_size)
        ids = rollout.response_ids  # (P * k, max_new_tokens): nothing ended early
        scored = torch.ones_like(ids) if config.score_after_eos else mask_after_eos(ids, eos)
        rows = [row[:n] for row, n in zip(ids.tolist(), scored.sum(1).tolist())]
        texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
        table = [[gsm8k_protocol.is_correct(texts[i * k + j], gold[i]) for j in range(k)] for i in range(len(gold))]
        return table, texts, 0 if eos is None else int((ids == eos).any(1).sum())

    widest = max(config.ks)
    draws = {k: draw(k) for k in config.ks} if config.resample_per_k else dict.fromkeys(config.ks, draw(widest))
    drawn = list(draws.values()) if config.resample_per_k else [draws[widest]]
    accuracy = {k: gsm8k_protocol.any_of_k(draws[k][0], k) for k in config.ks}
    correct = {k: [int(any(row[:k])) for row in draws[k][0]] for k in config.ks}
    table, texts, _ = draws[widest]
    return {
        "accuracy": accuracy,
        "correct": correct,
        "eos_rate": sum(d[2] for d in drawn) / sum(len(d[1]) for d in drawn),
        "samples": [
            {
                "question": questions[i],
                "gold": gold[i],
                "response": texts[i * widest],
                "parsed": gsm8k_protocol.clean_answer(texts[i * widest]),
                "correct": table[i][0],
            }
            for i in range(min(n_examples, len(questions)))
        ],
    }


def evaluate_folder(folder: Path, config: EvalConfig, prompt_template: str, questions: list[str], answers: list[str],
                    device: str) -> dict:
    """`evaluate_pass_at_k` of the model saved in `folder` (a transformers folder with its tokenizer), on `device`;
    with `config.authors_protocol.enabled` also `evaluate_authors_protocol`'s results, under AUTHORS."""
    from transformers import AutoModelForCausalLM

    from cory.tasks.tokenizer import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(folder).to(device)
    tokenizer = load_tokenizer(str(folder))
    result = evaluate_pass_at_k(model, tokenizer, questions, answers, prompt_template, config)
    if config.authors_protocol.enabled:
        result[AUTHORS] = evaluate_authors_protocol(model, tokenizer, questions, answers, config.authors_protocol,
                                                    config.batch_size, config.n_examples)
    return result


def summarise(per_run: dict[str, dict[str, dict[int, float]]]) -> dict:
    """{model: {seed: {k: v}}} -> {model: {"seeds": ..., "mean": {k: ...}, "std": {k: ...}}} over seeds (the
    population std, ddof 0)."""
    summary = {}
    for name, seeds in per_run.items():
        ks = list(next(iter(seeds.values())))
        values = {k: [run[k] for run in seeds.values()] for k in ks}
        summary[name] = {
            "seeds": seeds,
            "mean": {k: float(np.mean(v)) for k, v in values.items()},
            "std": {k: float(np.std(v)) for k, v in values.items()},
        }
    return summary


def over_seeds(runs: list[tuple[str, str]], results: dict[tuple[str, str], dict]) -> tuple[dict, dict]:
    """(passk, details) of the model runs `runs` ((model name, seed key), in the order to keep) from each run's
    `evaluate_folder` result in `results`: passk {model: `summarise`'s entry of its pass@k, and of the authors'
    accuracy under AUTHORS where it was measured}; details {model: {seed: {"correct", "mean_response_length",
    "samples", and the authors' protocol's details but its accuracy, under AUTHORS}}}."""
    per_run: dict[str, dict[str, dict[int, float]]] = {}
    authors: dict[str, dict[str, dict[int, float]]] = {}
    details: dict[str, dict[str, dict]] = {}
    for name, seed in runs:
        result = results[name, seed]
        per_run.setdefault(name, {})[seed] = result["pass_at_k"]
        details.setdefault(name, {})[seed] = {
            key: result[key] for key in ("correct", "mean_response_length", "samples")
        }
        if AUTHORS in result:
            authors.setdefault(name, {})[seed] = result[AUTHORS]["accuracy"]
            details[name][seed][AUTHORS] = {key: value for key, value in result[AUTHORS].items() if key != "accuracy"}
    passk = summarise(per_run)
    for name, summary in summarise(authors).items():
        passk[name][AUTHORS] = summary
    return passk, details
