"""One agent's PPO step on its buffer: build the experience, then run the PPO epochs (trl 0.7 `PPOTrainer.step`).

`make_experience` is the no-grad half (forward passes of policy and reference, per-token KL, reward shaping, GAE);
`ppo_update` is the learning half (epochs over shuffled mini-batches with the clipped losses). The math lives in
`cory.rl.ppo`; this module only moves tensors between it and the models.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from cory.rl import ppo
from cory.rl.agents import Agent
from cory.rl.kernels import autocast, vocabulary_pass
from cory.rl.ppo import NonFiniteError
from cory.rl.rollout import Rollout, forward_response


@dataclass
class Experience:
    """An agent's buffer for one iteration: (s~_0, a, r) of Algorithm 1, lines 15-16, with what PPO derives."""

    rollout: Rollout
    scores: torch.Tensor  # (B,) training scores after the group baseline, scaling and clipping
    logprobs: torch.Tensor  # (B, T) log pi_old(a_t)
    values: torch.Tensor  # (B, T) V_old(s_t)
    kl: torch.Tensor  # (B, T) exact per-token KL(pi_old || pi_ref), always
    kl_penalty: torch.Tensor  # (B, T) the estimator the reward uses
    entropy: torch.Tensor  # (B, T) exact per-token entropy of pi_old
    rewards: torch.Tensor  # (B, T) -beta * kl_penalty, + score on the last token
    advantages: torch.Tensor  # (B, T) whitened GAE advantages
    returns: torch.Tensor  # (B, T) advantages (before whitening) + values

    @property
    def mask(self) -> torch.Tensor:
        return self.rollout.response_mask


def whole_groups(finite: torch.Tensor, group_size: int = 1) -> torch.Tensor:
    """(B,) bool -> (B,) bool: the samples to keep, i.e. the finite ones whose whole group of `group_size`
    consecutive rows (the attempts at one query) is finite, since a group is its own baseline."""
    return finite.view(-1, group_size).all(1).repeat_interleave(group_size) if group_size > 1 else finite


@torch.no_grad()
def make_experience(
    agent: Agent, ref_lm, rollout: Rollout, scores: torch.Tensor, keep: torch.Tensor | None = None
) -> Experience:
    """Forward passes (policy in eval mode, and the reference), KL, shaped rewards and advantages.

    `ref_lm` is the reference pi_0: a frozen copy of the model, or the agents' shared LoRA model with its adapters
    disabled (cory.rl.lora.AdaptersDisabled); either is called like a transformers causal LM.

    `keep` (B,) bool leaves samples out of the update (ppo.on_nonfinite: skip): their response mask is zeroed, so no
    loss, statistic or score moment sees them."""
    cfg = agent.cfg
    device = agent.device
    rollout = rollout.to(device)
    scores = scores.to(device).float()
    if keep is not None:
        keep = keep.to(device)
        rollout = replace(rollout, response_mask=rollout.response_mask * keep[:, None])
        scores = torch.where(keep, scores, 0.0)
    mask = rollout.response_mask.float()
    agent.activate()
    agent.train(False)  # trl's batched_forward_pass runs in eval mode: no dropout in the old log-probs, any mode
    chunk = cfg.speed.forward_batch_size or len(rollout.prompts)
    parts = []
    for start in range(0, len(rollout.prompts), chunk):
        part = rollout.select(torch.arange(start, min(start + chunk, len(rollout.prompts))))  # a host index: no sync
        with autocast(device, cfg.speed.autocast):
            logits, values = forward_response(agent.forward_lm, part, agent.value_head)
            ref_logits, _ = forward_response(ref_lm, part)
        statistics = vocabulary_pass(ppo.response_statistics, cfg.speed, logits)
        parts.append((*statistics(logits, ref_logits, part.response_ids), values.float()))
    logprobs, ref_logprobs, kl, entropy, values = (torch.cat(x) for x in zip(*parts))

    if cfg.group_baseline:
        scores = ppo.leave_one_out_baseline(scores, cfg.samples_per_query)
    scores = ppo.scale_scores(
        scores,
        agent.score_moments,
        cfg.use_score_scaling,
        cfg.use_score_norm,
        cfg.score_clip,
        valid=keep,
    )
    kl_penalty = ppo.kl_estimate(cfg.kl_penalty, logprobs, ref_logprobs, exact=kl) * mask
    rewards, _ = ppo.shape_rewards(scores, kl_penalty, mask, agent.kl_ctl.value)
    if cfg.whiten_rewards:
        rewards = ppo.masked_whiten(rewards, mask, shift_mean=False) * mask
    advantages, returns = ppo.gae(rewards, values, mask, cfg.gamma, cfg.lam)
    advantages = ppo.masked_whiten(advantages, mask) * mask
    _check_finite(mask, scores=scores, logprobs=logprobs, reference_logprobs=ref_logprobs, values=values, kl=kl,
                  advantages=advantages, returns=returns)
    return Experience(rollout, scores, logprobs, values * mask, kl * mask, kl_penalty, entropy * mask, rewards,
                      advantages, returns)


def ppo_update(agent: Agent, exp: Experience, generator: torch.Generator | None = None) -> dict[str, float]:
    """PPO epochs over shuffled mini-batches, then the KL controller update. Returns the step's statistics.

    Each optimizer step accumulates `gradient_accumulation_steps` mini-batches, each with its own loss (trl's masked
    means over the mini-batch). `speed.update_batch_size` runs several of them in one forward/backward pass; their
    losses, ratio checks and statistics stay per mini-batch, so the step is the same up to float rounding."""
    cfg = agent.cfg
    B = exp.scores.shape[0]
    # trl computes the update's log-probs and values with the same batched_forward_pass, in eval mode: ppo.dropout
    # "trl" (and "none") update without dropout; only "update" drops here.
    agent.activate()
    agent.train(cfg.dropout == "update")
    counts = {"skipped": 0, "skipped_steps": 0}
    stats_acc = []
    for epoch in range(cfg.ppo_epochs):
        order = torch.randperm(B, generator=generator)  # on the host: picking a mini-batch waits for no device
        for start in range(0, B, cfg.backward_batch_size):
            backward_idx = order[start : start + cfg.backward_batch_size]
            for pass_start in range(0, len(backward_idx), cfg.update_pass_size):
                rows = backward_idx[pass_start : pass_start + cfg.update_pass_size]
                _update_pass(agent, exp, rows, epoch, start + pass_start, stats_acc, counts)
            # Clip (if set) and check the gradient in one pass: a non-finite gradient (a kernel's NaN, an overflow)
            # is dropped rather than stepped on, as AMP's GradScaler does, so one bad batch cannot poison the weights.
            norm = torch.nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm or float("inf"))
            if torch.isfinite(norm).item():
                agent.optimizer.step()
                agent.refresh_copy()
            elif cfg.on_nonfinite == "error":
                raise NonFiniteError(f"non-finite gradient (norm {norm.item()}) in epoch {epoch}, optimizer step at "
                                     f"sample {start}")
            else:
                counts["skipped_steps"] += 1
            agent.optimizer.zero_grad(set_to_none=True)
    # One device->host sync for all the mini-batch statistics; None (an empty cell of history.csv, left out of the
    # final means) where every mini-batch was skipped as non-finite.
    stacked = ({k: torch.stack([s[k] for s in stats_acc]).mean().item() for k in stats_acc[0]} if stats_acc
               else dict.fromkeys(MINIBATCH_STATS))
    mask = exp.mask.float()
    kl_for_controller = (exp.kl_penalty * mask).sum(1).mean().item()
    agent.kl_ctl.update(kl_for_controller, B)
    return {
        **stacked,
        "skipped_minibatches": float(counts["skipped"]),
        "skipped_steps": float(counts["skipped_steps"]),
        "kl_coef": agent.kl_ctl.value,
    }


def _update_pass(agent: Agent, exp: Experience, rows: torch.Tensor, epoch: int, first: int, stats_acc: list,
                 counts: dict) -> None:
    """One forward/backward pass over the mini-batches at `rows` (host indices; `first`: the position of the first
    in the epoch's order), accumulating their gradients; their statistics go to `stats_acc`, skips to `counts`."""
    cfg = agent.cfg
    losses, stats, ratios, finite = _minibatch_losses(agent, exp, rows)
    n = len(losses)
    if n > 1 and not all(finite):
        # A non-finite activation in one mini-batch would reach the others' gradients through the shared pass
        # (0 x NaN): the pass is run again one mini-batch at a time, as without update_batch_size.
        for i in range(n):
            part = rows[i * cfg.mini_batch_size : (i + 1) * cfg.mini_batch_size]
            _update_pass(agent, exp, part, epoch, first + i * cfg.mini_batch_size, stats_acc, counts)
        return
    terms = []  # what each mini-batch adds to the pass's loss
    for i in range(n):
        if not finite[i] and cfg.on_nonfinite == "error":
            raise NonFiniteError(f"non-finite PPO loss (policy {stats[i]['policy_loss'].item()}, value "
                                 f"{stats[i]['value_loss'].item()}) in epoch {epoch}, mini-batch starting at "
                                 f"{first + i * cfg.mini_batch_size}")
        if finite[i]:  # a skipped non-finite mini-batch (under skip, also one whose samples were all dropped: its
            stats_acc.append(stats[i])  # masked means are 0/0) is counted below, not averaged in
        # A runaway mini-batch (mean ratio above the threshold) is skipped: no gradient ("skip"), or trl's
        # `loss * 0.0`, a zero gradient Adam still steps on ("trl"). A non-finite loss is never backpropagated: times 0
        # it would still give NaN gradients.
        kept = finite[i] and ratios[i] <= cfg.ratio_threshold
        counts["skipped"] += not kept
        if kept:
            terms.append(losses[i])
        elif finite[i] and cfg.ratio_threshold_mode == "trl":
            terms.append(losses[i] * 0.0)
    if not terms:
        return
    (sum(terms[1:], terms[0]) / cfg.gradient_accumulation_steps).backward()
    agent.collect_gradients()  # ppo.speed.bf16_weights: onto the fp32 weights


MINIBATCH_STATS = ("policy_loss", "value_loss", "policy_clipfrac", "value_clipfrac", "approx_kl")
"""The statistics each mini-batch's loss reports (`_minibatch_losses`), averaged over the update's mini-batches."""


def _check_finite(mask: torch.Tensor, **tensors: torch.Tensor) -> None:
    """Raise NonFiniteError naming every tensor with a NaN or inf on a kept sample (one device->host sync).
    (B, T) tensors are checked where `mask` is 1, (B,) ones on the rows that have any response token."""
    kept_rows = mask.sum(1) > 0
    checks = [torch.isfinite(x[mask.bool()] if x.dim() == 2 else x[kept_rows]).all() for x in tensors.values()]
    bad = [name for name, ok in zip(tensors, torch.stack(checks).tolist()) if not ok]
    if bad:
        raise NonFiniteError(f"non-finite {', '.join(bad)} in the experience (forward passes, scores, GAE)")


def _minibatch_losses(agent: Agent, exp: Experience, rows: torch.Tensor):
    """One forward pass over `rows` (a host index), consecutive mini-batches of ppo.mini_batch_size: per mini-batch its
    PPO loss, statistics, mean ratio and whether the loss is finite (lists, one entry per mini-batch)."""
    cfg = agent.cfg
    idx = rows.to(agent.device, non_blocking=True)
    part = exp.rollout.select(rows, on_device=idx)
    mask = part.response_mask.float()
    with autocast(agent.device, cfg.speed.autocast):
        logits, values = forward_response(agent.forward_lm, part, agent.value_head)
    logprobs = vocabulary_pass(ppo.token_logprobs, cfg.speed, logits, eager=ppo.logprobs_of)(logits, part.response_ids)
    values = values.float()
    losses, stats, checks = [], [], []
    size = cfg.mini_batch_size
    for start in range(0, len(rows), size):
        mb, at = slice(start, start + size), idx[start : start + size]
        pg_loss, pg_stats = ppo.policy_loss(logprobs[mb], exp.logprobs[at], exp.advantages[at], mask[mb],
                                            cfg.cliprange)
        vf_loss, vf_stats = ppo.value_loss(values[mb], exp.values[at], exp.returns[at], mask[mb], cfg.cliprange_value)
        loss = pg_loss + cfg.vf_coef * vf_loss
        losses.append(loss)
        stats.append({
            "policy_loss": pg_loss.detach(),
            "value_loss": vf_loss.detach(),
            "policy_clipfrac": pg_stats["clipfrac"],
            "value_clipfrac": vf_stats["clipfrac"],
            "approx_kl": pg_stats["approx_kl"],
        })
        checks += [pg_stats["ratio"].detach(), torch.isfinite(loss.detach()).float()]
    # The ratio checks need their values on the host: one sync per pass (trl makes one per mini-batch).
    values_on_host = torch.stack(checks).tolist()
    return losses, stats, values_on_host[0::2], [f == 1.0 for f in values_on_host[1::2]]
