"""Pass@k on math problems (the paper's Fig. 5, CORY.md §4): sample n answers per problem, count the correct ones.

pass@k is the probability that at least one of k answers drawn from the n samples is correct, estimated without bias
as in Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", Eq. 1 and its numerically stable form):

    pass@k = E_problems[ 1 - C(n - c, k) / C(n, k) ],   c = correct samples of the problem.

Sampling is plain: temperature 1, no top-k / top-p filtering, no repetition penalty, unless configured otherwise.
"""

from __future__ import annotations

import numpy as np
import torch

from cory.rl.rollout import generate
from cory.tasks.config import EvalConfig
from cory.tasks.rewards import MathReward, Reward


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
