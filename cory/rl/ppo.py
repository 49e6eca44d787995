"""PPO math as pure functions: no models, no trainer state, no transformers import.

Every function ports one piece of the PPO step the paper used (trl 0.7.x `PPOTrainer.step`, docs/algorithm.md); the
docstring names the piece. Shapes: B = batch, T = response length (the response block, right-padded),
V = vocabulary. `mask` is 1 on real response tokens (up to and including EOS) and 0 on padding.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------------------------------------------------
# Masked statistics (trl.core.masked_mean / masked_var / masked_whiten)
# --------------------------------------------------------------------------------------------------------------------


class NonFiniteError(FloatingPointError):
    """A NaN or inf in the logits being sampled, a score, a loss, a gradient or a PPO statistic (ppo.on_nonfinite:
    error); the message names the source, and the trainer adds the iteration and the agent."""


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `values` where `mask` is 1, over all elements (dim=None) or along `dim`. Masked-out entries are
    dropped, not multiplied by 0, so an inf or NaN there (a pad token's log-ratio, say) cannot leak into the mean."""
    kept = torch.where(mask.bool(), values, 0.0)
    if dim is None:
        return kept.sum() / mask.sum()
    return kept.sum(dim) / mask.sum(dim)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of `values` where `mask` is 1, with Bessel's correction by default (as TRL)."""
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        count = mask.sum()
        if count < 2:
            raise ValueError("masked_var: unbiased variance needs at least 2 unmasked elements")
        variance = variance * count / (count - 1)
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8) over unmasked elements; `shift_mean=False` adds the mean back."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


# --------------------------------------------------------------------------------------------------------------------
# Log-probabilities, entropy and KL
# --------------------------------------------------------------------------------------------------------------------


def _log_softmax(logits: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(logits.float(), dim=-1)


def _at(logp: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """logp (B, T, V) at tokens (B, T) -> (B, T)."""
    return torch.gather(logp, 2, tokens.unsqueeze(-1)).squeeze(-1)


def _kl(p: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return (p * (logp - ref_logp)).sum(-1)


def _entropy(p: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    return -(p * logp).sum(-1)


def logprobs_of(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log pi(token) from logits (B, T, V) and tokens (B, T) -> (B, T), at temperature 1 (as TRL)."""
    return _at(_log_softmax(logits), tokens)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log pi(token) as the token's logit less the log-sum-exp over the vocabulary: (B, T, V), (B, T) -> (B, T), the
    values of logprobs_of up to float rounding, with no (B, T, V) log-softmax tensor in between. Compiled
    (ppo.speed.fused_vocab), its forward is one pass over the logits and its backward one more."""
    logits = logits.float()
    return _at(logits, tokens) - logits.logsumexp(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Exact per-position entropy of softmax(logits): (B, T, V) -> (B, T)."""
    logp = _log_softmax(logits)
    return _entropy(logp.exp(), logp)


def full_kl(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    """Exact KL(pi || pi_ref) over the vocabulary at each position: (B, T, V) x 2 -> (B, T).

    Equals TRL's `F.kl_div(ref_logprob, logprob, log_target=True).sum(-1)` for kl_penalty="full" (paper Eq. 2).
    """
    logp = _log_softmax(logits)
    return _kl(logp.exp(), logp, _log_softmax(ref_logits))


def response_statistics(logits: torch.Tensor, ref_logits: torch.Tensor, tokens: torch.Tensor):
    """The experience's per-token quantities from the policy's and the reference's logits (B, T, V) and the sampled
    tokens (B, T): (log pi(token), log pi_ref(token), full_kl, entropy), each (B, T). The same values, bit for bit,
    as logprobs_of (twice), full_kl and entropy_from_logits, from one log-softmax of each model's logits and one exp
    instead of six log-softmaxes and two exps over the vocabulary (memory-bound passes over B x T x V floats)."""
    logp, ref_logp = _log_softmax(logits), _log_softmax(ref_logits)
    p = logp.exp()
    return _at(logp, tokens), _at(ref_logp, tokens), _kl(p, logp, ref_logp), _entropy(p, logp)


def kl_estimate(kind: str, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, exact: torch.Tensor | None = None):
    """Per-token KL penalty estimator (trl 0.7 `_kl_penalty`); (B, T) inputs -> (B, T).

    kind "kl": log p - log q (unbiased, can be negative); "abs": |log p - log q|; "mse": 0.5 (log p - log q)^2;
    "full": the exact KL over the vocabulary, which the caller computes with `full_kl` and passes as `exact`.
    """
    diff = logprobs - ref_logprobs
    if kind == "kl":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "mse":
        return 0.5 * diff.square()
    if kind == "full":
        if exact is None:
            raise ValueError("kl_estimate('full') needs the exact per-token KL (see full_kl)")
        return exact
    raise ValueError(f"unknown KL estimator {kind!r}; choose kl, abs, mse or full")


# --------------------------------------------------------------------------------------------------------------------
# Rewards, advantages and losses
# --------------------------------------------------------------------------------------------------------------------


def shape_rewards(
    scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards (trl 0.7 `compute_rewards`, paper Eq. 2).

    scores (B,), kl (B, T), mask (B, T) -> rewards (B, T), non_score_rewards (B, T): r_t = -beta * KL_t on every
    response token, plus the sequence score on the last unmasked token. Padding positions get 0.
    """
    non_score = -kl_coef * kl * mask
    last = mask.shape[1] - 1 - mask.flip(1).float().argmax(1)  # (B,) index of the last real token
    rewards = non_score.clone()
    rewards[torch.arange(len(scores), device=scores.device), last] += scores.to(rewards.dtype)
    return rewards, non_score


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over response tokens (trl 0.7 `compute_advantages`, paper Eq. 12).

    rewards, values, mask (B, T) -> advantages (B, T) (not yet whitened), returns = advantages + values (B, T).
    Values and rewards are zeroed on padding, so the bootstrap after the last real token is 0.
    """
    values, rewards = values * mask, rewards * mask
    T = rewards.shape[1]
    lastgaelam = torch.zeros_like(rewards[:, 0])
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(T)):
        next_values = values[:, t + 1] if t < T - 1 else torch.zeros_like(lastgaelam)
        delta = rewards[:, t] + gamma * next_values - values[:, t]
        lastgaelam = delta + gamma * lam * lastgaelam
        advantages[:, t] = lastgaelam
    return advantages, advantages + values


def policy_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, cliprange: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate objective (paper Eq. 11, trl 0.7 `loss`); all (B, T) -> scalar loss, stats.

    loss = masked mean of max(-A * rho, -A * clip(rho, 1 - eps, 1 + eps)), rho = exp(logp - logp_old).
    """
    # Pad positions get log-ratio 0 before the exp: exp of a large pad log-ratio is inf, and inf * 0 (or the
    # gradient of a masked inf) is NaN, which one Adam step spreads into every weight.
    log_ratio = torch.where(mask.bool(), logprobs - old_logprobs, 0.0)
    ratio = torch.exp(log_ratio)
    losses = -advantages * ratio
    losses_clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    loss = masked_mean(torch.max(losses, losses_clipped), mask)
    stats = {
        "clipfrac": masked_mean((losses_clipped > losses).float(), mask),
        "approx_kl": 0.5 * masked_mean(log_ratio**2, mask),
        "ratio": masked_mean(ratio, mask),
    }
    return loss, stats


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, cliprange_value: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss (paper Eq. 10 with TRL's clipping); all (B, T) -> scalar loss, stats.

    loss = 0.5 * masked mean of max((V - R)^2, (clip(V, V_old - eps_v, V_old + eps_v) - R)^2).
    """
    # V itself where it lies inside the range (trl's clip_by_value), not V_old + clamp(V - V_old): near 0 that sum
    # is V only up to rounding, and `clipfrac` counted about one unclipped token in nine as clipped
    clipped = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    losses = (values - returns) ** 2
    losses_clipped = (clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(losses, losses_clipped), mask)
    return loss, {"clipfrac": masked_mean((losses_clipped > losses).float(), mask)}


# --------------------------------------------------------------------------------------------------------------------
# KL controllers and score normalisation (trl 0.7 AdaptiveKLController / FixedKLController / RunningMoments)
# --------------------------------------------------------------------------------------------------------------------


class FixedKLController:
    """beta stays at its initial value."""

    def __init__(self, kl_coef: float):
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        pass


class AdaptiveKLController:
    """Adaptive KL coefficient of Ziegler et al. (2019):

    beta <- beta * (1 + clip(KL / target - 1, -0.2, 0.2) * n_steps / horizon), where KL is the batch mean of the
    per-sequence summed KL estimate and n_steps the batch size.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float):
        self.value, self.target, self.horizon = init_kl_coef, target, horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + proportional_error * n_steps / self.horizon


class RunningMoments:
    """Running mean and std of every score seen so far (parallel-variance update, trl 0.7 `RunningMoments`)."""

    def __init__(self) -> None:
        self.mean, self.var, self.std, self.count = 0.0, 1.0, 1.0, 1e-24

    def update(self, xs: torch.Tensor) -> None:
        xs = xs.detach().double().flatten()
        n = xs.numel()
        xs_var, xs_mean = torch.var_mean(xs, unbiased=False)
        delta = xs_mean.item() - self.mean
        total = self.count + n
        old_sum = self.var * self.count + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.var = (old_sum + xs_var.item() * n) / total
        self.std = math.sqrt(self.var * total / (total - 1)) if total > 1 else 1.0
        self.count = total


def leave_one_out_baseline(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each score minus the mean of the other `group_size - 1` scores of its group (RLOO, Ahmadian et al. 2024).

    scores (B,) hold B / group_size groups of consecutive rows (the k responses to one query) -> (B,). The result
    sums to 0 within each group; k * s_i - sum_j s_j over (k - 1) is the same quantity.
    """
    if group_size < 2 or scores.shape[0] % group_size:
        raise ValueError(f"need groups of >= 2 that divide the batch, got {scores.shape[0]} scores in groups of {group_size}")
    groups = scores.view(-1, group_size)
    others = (groups.sum(1, keepdim=True) - groups) / (group_size - 1)
    return (groups - others).view(-1)


def scale_scores(
    scores: torch.Tensor, moments: RunningMoments, use_scaling: bool, use_norm: bool, clip: float | None,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Score scaling/normalisation by running moments, then optional clipping (trl 0.7 `step`, L774).

    With scaling, the moments are first updated with this batch (only its `valid` rows, a (B,) bool mask, if given),
    then s / (std + eps), or (s - mean) / (std + eps) with `use_norm`. (B,) -> (B,).
    """
    if use_scaling:
        moments.update(scores if valid is None else scores[valid])
        eps = torch.finfo(scores.dtype).eps
        centred = scores - moments.mean if use_norm else scores
        scores = centred / (moments.std + eps)
    if clip is not None:
        scores = scores.clamp(-clip, clip)
    return scores
