"""Pass@k on math problems (the paper's Fig. 5, CORY.md §4): sample n answers per problem, count the correct ones.

pass@k is the probability that at least one of k answers drawn from the n samples is correct, estimated without bias
as in Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", Eq. 1 and its numerically stable form):

    pass@k = E_problems[ 1 - C(n - c, k) / C(n, k) ],   c = correct samples of the problem.

Sampling is plain: temperature 1, no top-k / top-p filtering, no repetition penalty, unless configured otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from cory.config import GenerationConfig, check, section_path
from cory.rewards import MathReward, Reward
from cory.rollout import generate


@dataclass
class EvalConfig:
    """Pass@k sampling settings (params `evaluation`)."""

    n_samples: int = 16
    """n: answers sampled per problem."""
    ks: tuple[int, ...] = (1, 2, 4, 8, 16)
    """The k of each reported pass@k; every k must be <= n_samples."""
    n_problems: int | None = None
    """Evaluate the first n_problems test problems; null evaluates all of them."""
    max_new_tokens: int = 128
    """Longest answer in tokens; an answer that has not ended by then is cut there."""
    temperature: float = 1.0
    """Sampling temperature."""
    top_k: int = 0
    """0 disables top-k filtering."""
    top_p: float = 1.0
    """1.0 disables nucleus filtering."""
    repetition_penalty: float = 1.0
    """1.0 samples from the policy itself (no HF repetition penalty)."""
    batch_size: int = 64
    """Prompts generated at once."""
    seed: int = 0
    """Torch seed set before sampling, so every model is evaluated on the same random stream."""
    n_examples: int = 4
    """Generations kept per model (the first sample of the first n_examples problems) for inspection."""

    def __post_init__(self) -> None:
        path = section_path("evaluation")
        check(self.n_samples > 0, f"{path}.n_samples", f"must be > 0, got {self.n_samples}")
        check(len(self.ks) > 0, f"{path}.ks", "must list at least one k")
        for i, k in enumerate(self.ks):
            check(0 < k <= self.n_samples, f"{path}.ks[{i}]", f"k must be in [1, n_samples={self.n_samples}], got {k}")
        check(
            self.n_problems is None or self.n_problems > 0,
            f"{path}.n_problems",
            f"must be > 0 or null, got {self.n_problems}",
        )
        for name in ("max_new_tokens", "batch_size", "temperature", "repetition_penalty"):
            check(getattr(self, name) > 0, f"{path}.{name}", f"must be > 0, got {getattr(self, name)}")
        check(self.top_k >= 0, f"{path}.top_k", f"must be >= 0, got {self.top_k}")
        check(0.0 < self.top_p <= 1.0, f"{path}.top_p", f"must be in (0, 1], got {self.top_p}")
        check(self.n_examples >= 0, f"{path}.n_examples", f"must be >= 0, got {self.n_examples}")

    @property
    def generation(self) -> GenerationConfig:
        return GenerationConfig(
            response_length=(self.max_new_tokens, self.max_new_tokens),
            top_k=self.top_k,
            top_p=self.top_p,
            temperature=self.temperature,
            repetition_penalty=self.repetition_penalty,
            stop_at_eos=True,
        )


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
