"""One agent's PPO step on its buffer: build the experience, then run the PPO epochs (trl 0.7 `PPOTrainer.step`).

`make_experience` is the no-grad half (forward passes of policy and reference, per-token KL, reward shaping, GAE);
`ppo_update` is the learning half (epochs over shuffled mini-batches with the clipped losses). The math lives in
`cory.rl.ppo`; this module only moves tensors between it and the models. An agent without a value head
(train.algorithm rloo or grpo) takes the same two calls through `cory.rl.critic_free`'s advantages and losses
(`_critic_free_experience`, `_critic_free_losses`); everything else, the epochs, mini-batches, skips and checks, is
the one loop below.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from cory.rl import critic_free, ppo
from cory.rl.agents import Agent
from cory.rl.kernels import autocast, vocabulary_pass
from cory.rl.ppo import NonFiniteError
from cory.rl.rollout import Rollout, forward_response, pad_blocks


@dataclass
class Experience:
    """An agent's buffer for one iteration: (s~_0, a, r) of Algorithm 1, lines 15-16, with what PPO derives."""

    rollout: Rollout
    scores: torch.Tensor  # (B,) training scores after the group baseline, scaling and clipping
    logprobs: torch.Tensor  # (B, T) log pi_old(a_t)
    values: torch.Tensor | None  # (B, T) V_old(s_t); None without a value head
    kl: torch.Tensor  # (B, T) exact per-token KL(pi_old || pi_ref), always
    kl_penalty: torch.Tensor  # (B, T) the estimator the reward uses
    entropy: torch.Tensor  # (B, T) exact per-token entropy of pi_old
    rewards: torch.Tensor  # (B, T) -beta * kl_penalty, + score on the last token
    advantages: torch.Tensor  # (B, T) whitened GAE advantages; critic-free: each answer's advantage on its tokens
    returns: torch.Tensor | None  # (B, T) advantages (before whitening) + values; None without a value head
    ref_logprobs: torch.Tensor | None = None  # (B, T) log pi_ref(a_t), which GRPO's KL term reads

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
    if cfg.speed.pad_shapes:  # a few shapes for the passes (and their compiled graphs); padding is masked out below
        rollout = pad_blocks(rollout, cfg.speed.pad_shapes)
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
        values = values.float() if values is not None else torch.zeros(part.response_ids.shape, device=device)
        parts.append((*statistics(logits, ref_logits, part.response_ids), values))
    logprobs, ref_logprobs, kl, entropy, values = (torch.cat(x) for x in zip(*parts))
    if agent.value_head is None:  # train.algorithm rloo or grpo
        return _critic_free_experience(agent, rollout, scores, keep, logprobs, ref_logprobs, kl, entropy)

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
    # speed.update_batch_size below a mini-batch: each pass's share of the mini-batch's tokens, known on the host
    tokens = exp.mask.sum(1).tolist() if cfg.split_minibatches else None
    for epoch in range(cfg.ppo_epochs):
        order = torch.randperm(B, generator=generator)  # on the host: picking a mini-batch waits for no device
        for start in range(0, B, cfg.backward_batch_size):
            backward_idx = order[start : start + cfg.backward_batch_size]
            if tokens is not None:
                _split_minibatch(agent, exp, backward_idx, tokens, epoch, start, stats_acc, counts)
            else:
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
               else dict.fromkeys(MINIBATCH_STATS if agent.value_head is not None else CRITIC_FREE_STATS))
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
            parts = ", ".join(f"{key.removesuffix('_loss')} {value.item()}" for key, value in stats[i].items()
                              if key.endswith("_loss"))
            raise NonFiniteError(f"non-finite PPO loss ({parts}) in epoch {epoch}, mini-batch starting at "
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


def _split_minibatch(agent: Agent, exp: Experience, rows: torch.Tensor, tokens: list[int], epoch: int, first: int,
                     stats_acc: list, counts: dict) -> None:
    """One mini-batch at `rows` (the whole optimizer step: gradient_accumulation_steps 1) in passes of
    speed.update_batch_size rows (less memory at once). Each pass backpropagates its masked means times its share of
    the mini-batch's response tokens (`tokens`: each row's count, on the host), so the gradients add up to those of the
    mini-batch's loss; passes without a response token are left out. Its ratio and whether its loss is finite are
    read once the last pass is done (one host sync, as for a whole mini-batch), and a skipped mini-batch's gradient
    is then dropped, or zeroed where trl's `loss * 0.0` steps on it (ratio_threshold_mode "trl")."""
    cfg = agent.cfg
    total = sum(tokens[i] for i in rows.tolist())
    loss, stats, ratio = 0.0, {}, 0.0
    for start in range(0, len(rows), cfg.update_pass_size):
        part = rows[start : start + cfg.update_pass_size]
        share = sum(tokens[i] for i in part.tolist()) / total if total else 0.0
        if not share:
            continue  # its masked means are 0 / 0: nothing to add, and no gradient
        (part_loss,), (part_stats,), (part_checks,) = _pass_losses(agent, exp, part)
        (part_loss * share).backward()
        agent.collect_gradients()  # ppo.speed.bf16_weights: onto the fp32 weights, summed there in fp32
        loss = loss + share * part_loss.detach()
        stats = {k: stats.get(k, 0.0) + share * v for k, v in part_stats.items()}
        ratio = ratio + share * part_checks[0]
    finite, ratio = torch.stack([torch.isfinite(loss).float(), ratio]).tolist() if stats else (0.0, 0.0)
    if not finite and cfg.on_nonfinite == "error":
        parts = ", ".join(f"{key.removesuffix('_loss')} {float(value)}" for key, value in stats.items()
                          if key.endswith("_loss"))
        raise NonFiniteError(f"non-finite PPO loss ({parts}) in epoch {epoch}, mini-batch starting at {first}")
    if finite:
        stats_acc.append(stats)
    kept = bool(finite) and ratio <= cfg.ratio_threshold
    counts["skipped"] += not kept
    if kept:
        return
    if finite and cfg.ratio_threshold_mode == "trl":
        torch._foreach_zero_([p.grad for p in agent.parameters() if p.grad is not None])  # trl's step on loss * 0
    else:
        agent.optimizer.zero_grad(set_to_none=True)  # as if never backpropagated


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
    losses, stats, checks = _pass_losses(agent, exp, rows)
    # The ratio checks need their values on the host: one sync per pass (trl makes one per mini-batch).
    values_on_host = torch.stack([x for pair in checks for x in pair]).tolist()
    return losses, stats, values_on_host[0::2], [f == 1.0 for f in values_on_host[1::2]]


def _pass_losses(agent: Agent, exp: Experience, rows: torch.Tensor):
    """One forward pass over `rows` (a host index): per mini-batch of ppo.mini_batch_size consecutive rows (or all of
    `rows`, where fewer) its PPO loss, its statistics and (its mean ratio, 1.0 where its loss is finite), on the
    device (lists, one entry per mini-batch)."""
    cfg = agent.cfg
    idx = rows.to(agent.device, non_blocking=True)
    part = exp.rollout.select(rows, on_device=idx)
    mask = part.response_mask.float()
    with autocast(agent.device, cfg.speed.autocast):
        logits, values = forward_response(agent.forward_lm, part, agent.value_head)
    logprobs = vocabulary_pass(ppo.token_logprobs, cfg.speed, logits, eager=ppo.logprobs_of)(logits, part.response_ids)
    if agent.value_head is None:  # train.algorithm rloo or grpo
        return _critic_free_losses(agent, exp, rows, idx, logprobs, mask)
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
        checks.append((pg_stats["ratio"].detach(), torch.isfinite(loss.detach()).float()))
    return losses, stats, checks


# --------------------------------------------------------------------------------------------------------------------
# Critic-free algorithms (train.algorithm rloo, grpo): the same step without a value head
# --------------------------------------------------------------------------------------------------------------------

CRITIC_FREE_STATS = ("policy_loss", "policy_clipfrac", "approx_kl")
"""The statistics each mini-batch's critic-free loss reports (`_critic_free_losses`)."""


def _critic_free_experience(agent: Agent, rollout: Rollout, scores: torch.Tensor, keep: torch.Tensor | None,
                            logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kl: torch.Tensor,
                            entropy: torch.Tensor) -> Experience:
    """make_experience's second half for an agent without a value head: the scores scaled as PPO's (ppo.use_score_
    scaling ...), then each answer's advantage from its group of k = ppo.samples_per_query answers to one query.
    RLOO: the return, score - beta x the summed KL estimate of the reward (ppo.kl_penalty, the agent's KL
    controller: PPO's reward summed over the response), less the other k - 1 answers' mean. GRPO: the score less its
    group's mean over the group's std; its KL is a term of the loss (train.grpo), `kl_penalty` its k3 estimate."""
    cfg, mask = agent.cfg, rollout.response_mask.float()
    scores = ppo.scale_scores(scores, agent.score_moments, cfg.use_score_scaling, cfg.use_score_norm, cfg.score_clip,
                              valid=keep)
    if agent.algorithm == "rloo":
        kl_penalty = ppo.kl_estimate(cfg.kl_penalty, logprobs, ref_logprobs, exact=kl) * mask
        rewards, _ = ppo.shape_rewards(scores, kl_penalty, mask, agent.kl_ctl.value)
        returns = critic_free.sequence_returns(scores, kl_penalty, mask, agent.kl_ctl.value)
        advantages = critic_free.rloo_advantages(returns, cfg.samples_per_query)
    else:
        kl_penalty = critic_free.k3_kl(logprobs, ref_logprobs, mask) * mask
        rewards, _ = ppo.shape_rewards(scores, torch.zeros_like(mask), mask, 0.0)  # the score alone: no KL reward
        advantages = critic_free.group_advantages(scores, cfg.samples_per_query)
    advantages = advantages[:, None] * mask
    _check_finite(mask, scores=scores, logprobs=logprobs, reference_logprobs=ref_logprobs, kl=kl,
                  advantages=advantages)
    return Experience(rollout, scores, logprobs, None, kl * mask, kl_penalty, entropy * mask, rewards, advantages,
                      None, ref_logprobs)


def _critic_free_losses(agent: Agent, exp: Experience, rows: torch.Tensor, idx: torch.Tensor, logprobs: torch.Tensor,
                        mask: torch.Tensor):
    """`_pass_losses` for an agent without a value head, from the pass's log-probs (rows: the host index, idx: its
    device copy): per mini-batch its RLOO or GRPO loss (cory.rl.critic_free), statistics and (mean ratio, 1.0 where
    the loss is finite), on the device."""
    cfg, grpo = agent.cfg, agent.grpo
    losses, stats, checks = [], [], []
    size = cfg.mini_batch_size
    for start in range(0, len(rows), size):
        mb, at = slice(start, start + size), idx[start : start + size]
        if agent.algorithm == "rloo":
            # an answer's advantage sits on each of its tokens, and its first response token is always a real one
            loss, mb_stats = critic_free.rloo_loss(logprobs[mb], exp.logprobs[at], exp.advantages[at, 0], mask[mb],
                                                   cfg.cliprange)
        else:
            ref = exp.ref_logprobs[at] if grpo.kl_coef else None
            loss, mb_stats = critic_free.grpo_loss(logprobs[mb], exp.logprobs[at], ref, exp.advantages[at, 0],
                                                   mask[mb], cfg.cliprange, grpo.kl_coef, grpo.kl_importance_weight)
        losses.append(loss)
        stats.append({"policy_loss": mb_stats["policy_loss"], "policy_clipfrac": mb_stats["clipfrac"],
                      "approx_kl": mb_stats["approx_kl"]})
        checks.append((mb_stats["ratio"].detach(), torch.isfinite(loss.detach()).float()))
    return losses, stats, checks
