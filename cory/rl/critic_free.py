"""The critic-free algorithms' math as pure functions: RLOO and GRPO (train.algorithm), no models, no trainer state,
no transformers import.

Both drop PPO's value head: an answer's baseline is the other answers to the same query, k of them side by side
(ppo.samples_per_query, consecutive rows). The sources of each formula are in docs/algorithm.md ("Critic-free
algorithms"): RLOO, Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from
Human Feedback in LLMs" (arXiv 2405.14782), as trl 1.16's `RLOOTrainer` computes it; GRPO, Shao et al. 2024,
"DeepSeekMath" (arXiv 2402.03300) §4.1, "Group Relative Policy Optimization", as trl 1.16's `GRPOTrainer` computes it;
the k3 estimator, Schulman 2020, "Approximating KL Divergence" (joschu.net/blog/kl-approx.html). Shapes: B = batch,
T = response block; `mask` is 1 on real response tokens, 0 on padding. A sample left out of the update
(ppo.on_nonfinite: skip) has an all-zero mask row and, with its whole group left out, a zero score.
"""

from __future__ import annotations

import torch

from cory.rl.ppo import leave_one_out_baseline, masked_mean, policy_loss

GROUP_STD_EPS = 1e-4
"""Added to a group's std before dividing by it (trl's GRPOTrainer): a group of equal scores gets advantage 0."""


def sequence_returns(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """RLOO's return of each answer: its score less beta x its summed per-token KL estimate, R = s - beta sum_t KL_t,
    which is the sum over the response of PPO's shaped rewards (cory.rl.ppo.shape_rewards; trl's RLOOTrainer:
    `rewards - beta * kl.sum(-1)`). scores (B,), kl and mask (B, T) -> (B,)."""
    return scores - kl_coef * torch.where(mask.bool(), kl, 0.0).sum(1)


def rloo_advantages(returns: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each answer's return less the mean return of the other k - 1 answers to its query (Ahmadian et al. 2024's
    leave-one-out baseline). returns (B,) in groups of k consecutive rows -> (B,), summing to 0 within each group."""
    return leave_one_out_baseline(returns, group_size)


def group_advantages(scores: torch.Tensor, group_size: int, eps: float = GROUP_STD_EPS) -> torch.Tensor:
    """GRPO's outcome advantage (DeepSeekMath §4.1, outcome supervision; trl's GRPOTrainer, scale_rewards "group"):
    (s_i - mean of its group) / (std of its group + eps), the std with Bessel's correction, as torch.std and trl's
    `nanstd`. scores (B,) in groups of k consecutive rows -> (B,)."""
    if group_size < 2 or scores.shape[0] % group_size:
        raise ValueError(f"need groups of >= 2 that divide the batch, got {scores.shape[0]} scores in groups of "
                         f"{group_size}")
    groups = scores.view(-1, group_size)
    centred = groups - groups.mean(1, keepdim=True)
    return (centred / (groups.std(1, keepdim=True) + eps)).view(-1)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimate of KL(pi || pi_ref) per sampled token: r - log r - 1 with r = pi_ref / pi, i.e. exp(log
    pi_ref - log pi) - (log pi_ref - log pi) - 1: unbiased under samples of pi, never negative (trl's GRPOTrainer
    `per_token_kl`, DeepSeekMath's estimator of the KL term of its objective). (B, T) x 3 -> (B, T), 0 on padding."""
    # The log-ratio is set to 0 on padding before the exp, as in cory.rl.ppo.policy_loss: exp of a large padding
    # log-ratio is inf, whose gradient times the mask's 0 is NaN.
    diff = torch.where(mask.bool(), ref_logprobs - logprobs, 0.0)
    return torch.exp(diff) - diff - 1.0


def grpo_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None, advantages: torch.Tensor,
    mask: torch.Tensor, cliprange: float, kl_coef: float, kl_importance_weight: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO's loss (DeepSeekMath's objective, negated; trl 1.16's `GRPOTrainer._compute_loss`, importance sampling per
    token): per token, max(-A rho, -A clip(rho, 1 - eps, 1 + eps)) + beta k3, with rho = pi_theta / pi_old, A the
    answer's group advantage on each of its tokens, and k3 weighted by rho where `kl_importance_weight` (trl's default
    use_bias_correction_kl); the masked token mean over the mini-batch (trl's loss_type "dapo" where a mini-batch is a
    whole optimizer step, "bnpo" otherwise). logprobs, old_logprobs, ref_logprobs (None with kl_coef 0) and mask
    (B, T), advantages (B,) -> scalar loss, stats: the clipped part's (cory.rl.ppo.policy_loss: clipfrac, approx_kl,
    ratio), its value `policy_loss`, and `kl`, the masked mean k3."""
    per_token = advantages[:, None].expand_as(logprobs)
    loss, stats = policy_loss(logprobs, old_logprobs, per_token, mask, cliprange)
    stats["policy_loss"] = loss.detach()
    if kl_coef:
        kl = k3_kl(logprobs, ref_logprobs, mask)
        stats["kl"] = masked_mean(kl, mask).detach()
        if kl_importance_weight:
            kl = kl * torch.exp(torch.where(mask.bool(), logprobs - old_logprobs, 0.0))
        loss = loss + kl_coef * masked_mean(kl, mask)
    return loss, stats


def rloo_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    cliprange: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """RLOO's loss (trl 1.16's `RLOOTrainer._compute_loss`): the clipped surrogate on each answer's whole-sequence
    ratio rho = pi_theta(y) / pi_old(y) = exp(sum_t log-ratio_t), max(-A rho, -A clip(rho, 1 - eps, 1 + eps)), the
    mean over the mini-batch's answers; on-policy its gradient is REINFORCE's -A grad log pi(y) with the
    leave-one-out baseline (Ahmadian et al. 2024). logprobs, old_logprobs, mask (B, T), advantages (B,) ->
    scalar loss, stats (clipfrac and ratio per answer, approx_kl per token as PPO's)."""
    token_log_ratio = torch.where(mask.bool(), logprobs - old_logprobs, 0.0)
    ratio = torch.exp(token_log_ratio.sum(1))  # (B,)
    losses = -advantages * ratio
    losses_clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    answers = (mask.sum(1) > 0).float()  # an answer left out of the update (an all-zero mask row) counts for nothing
    loss = masked_mean(torch.max(losses, losses_clipped), answers)
    stats = {
        "clipfrac": masked_mean((losses_clipped > losses).float(), answers),
        "approx_kl": 0.5 * masked_mean(token_log_ratio**2, mask),
        "ratio": masked_mean(ratio, answers),
        "policy_loss": loss.detach(),
    }
    return loss, stats
