"""The task reward's contract: what `Trainer` calls to score responses, and the check of what it returns.

A reward is any callable `reward(queries, responses, answers) -> scores`: one float score per response, as a (B,)
tensor. The trainer calls it once per iteration for every role at once (the pioneer's responses, then the
observer's), so B is the number of responses of all roles, and `queries` and `answers` are repeated to match. What
comes back is checked before any update uses it: a list, a (B, 1) tensor or B - 1 scores stop the run with one line
saying what was expected and what came, instead of an error deep inside the PPO step.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch


class RewardFn(Protocol):
    """reward(queries, responses, answers) -> (B,) float tensor of task scores, higher is better.

    queries: the B task queries as given to `Trainer.step` (not the templated prompts); responses: the B sampled
    responses, decoded without EOS or padding; answers: the B reference answers given to `Trainer.step` (e.g. a math
    problem's final number), or None. Scores may be on any scale (`ppo.use_score_scaling` normalises them); a
    non-finite score is handled as `ppo.on_nonfinite` says."""

    def __call__(self, queries: Sequence[str], responses: Sequence[str],
                 answers: Sequence[str] | None) -> torch.Tensor: ...


class RewardError(ValueError):
    """A reward returned something other than one real score per response as a (B,) tensor."""


def check_scores(scores, n: int, where: str = "the task reward") -> torch.Tensor:
    """`scores` itself where it is a (n,) tensor of real numbers, else one RewardError saying what was expected and
    what came."""
    expected = f"expected a (B,) float tensor with B = {n}, one score per response (RewardFn)"
    if not isinstance(scores, torch.Tensor):
        raise RewardError(f"{where} returned a {type(scores).__name__}; {expected}, e.g. torch.tensor(scores)")
    if scores.dtype.is_complex or scores.dtype == torch.bool:
        raise RewardError(f"{where} returned a tensor of {scores.dtype}; {expected}")
    if scores.dim() != 1 or scores.shape[0] != n:
        raise RewardError(f"{where} returned a tensor of shape {tuple(scores.shape)}; {expected}")
    return scores
