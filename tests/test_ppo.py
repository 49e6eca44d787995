"""PPO math against numbers worked out by hand (see the comments) and against equivalent formulations."""

import math

import pytest
import torch

from cory.rl import ppo


def t(x):
    return torch.tensor(x, dtype=torch.float32)


def test_masked_mean_and_whiten():
    x, mask = t([[1.0, 2.0, 3.0, 4.0, 100.0]]), t([[1, 1, 1, 1, 0]])
    assert ppo.masked_mean(x, mask).item() == pytest.approx(2.5)
    # unbiased variance of 1..4 = 5/3; whitened = (x - 2.5) / sqrt(5/3)
    assert ppo.masked_var(x, mask).item() == pytest.approx(5 / 3)
    w = ppo.masked_whiten(x, mask)[0, :4]
    assert torch.allclose(w, t([-1.161895, -0.387298, 0.387298, 1.161895]), atol=1e-5)
    # shift_mean=False keeps the mean
    w2 = ppo.masked_whiten(x, mask, shift_mean=False)[0, :4]
    assert torch.allclose(w2, w + 2.5, atol=1e-6)


def test_masked_op_on_padded_equals_op_on_trimmed():
    torch.manual_seed(0)
    x = torch.randn(3, 6)
    mask = t([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]])
    trimmed = torch.cat([x[0, :3], x[1, :5], x[2, :2]])
    assert ppo.masked_mean(x, mask).item() == pytest.approx(trimmed.mean().item(), abs=1e-6)
    assert ppo.masked_var(x, mask).item() == pytest.approx(trimmed.var().item(), abs=1e-5)


def test_kl_estimators_on_literal_tensors():
    logp, ref = t([[math.log(0.5)]]), t([[math.log(0.25)]])
    assert ppo.kl_estimate("kl", logp, ref).item() == pytest.approx(math.log(2))
    assert ppo.kl_estimate("abs", ref, logp).item() == pytest.approx(math.log(2))  # |log q - log p|
    assert ppo.kl_estimate("mse", logp, ref).item() == pytest.approx(0.5 * math.log(2) ** 2)
    # full: p = (0.5, 0.5), q = (0.25, 0.75): 0.5 ln 2 + 0.5 ln(2/3) = 0.143841
    logits, ref_logits = t([[[0.0, 0.0]]]), torch.log(t([[[0.25, 0.75]]]))
    exact = ppo.full_kl(logits, ref_logits)
    assert exact.item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3), abs=1e-6)
    assert ppo.kl_estimate("full", logp, ref, exact=exact).item() == pytest.approx(exact.item())
    with pytest.raises(ValueError, match="unknown KL estimator"):
        ppo.kl_estimate("forward", logp, ref)


def test_full_kl_is_the_expectation_of_the_kl_estimator():
    torch.manual_seed(0)
    logits, ref_logits = torch.randn(1, 1, 7), torch.randn(1, 1, 7)
    p = torch.softmax(logits, -1)[0, 0]
    logp, ref = torch.log_softmax(logits, -1)[0, 0], torch.log_softmax(ref_logits, -1)[0, 0]
    assert ppo.full_kl(logits, ref_logits).item() == pytest.approx((p * (logp - ref)).sum().item(), abs=1e-6)


def test_entropy_of_uniform_is_log_v():
    assert ppo.entropy_from_logits(torch.zeros(1, 2, 8))[0].tolist() == pytest.approx([math.log(8)] * 2)


def test_shape_rewards_puts_score_on_last_real_token():
    scores, kl = t([2.0, -1.0]), t([[0.1, 0.2, 0.3, 0.0], [0.4, 0.0, 0.0, 0.0]])
    mask = t([[1, 1, 1, 0], [1, 0, 0, 0]])
    rewards, non_score = ppo.shape_rewards(scores, kl, mask, kl_coef=0.5)
    assert torch.allclose(rewards, t([[-0.05, -0.1, 1.85, 0.0], [-1.2, 0.0, 0.0, 0.0]]))
    assert torch.allclose(non_score, t([[-0.05, -0.1, -0.15, 0.0], [-0.2, 0.0, 0.0, 0.0]]))


def test_gae_three_tokens_by_hand():
    # gamma=1, lam=0.95; deltas: t2 = 1 - 0.3 = 0.7; t1 = 0.3 - 0.4 = -0.1; t0 = 0.4 - 0.5 = -0.1
    # A2 = 0.7; A1 = -0.1 + 0.95 * 0.7 = 0.565; A0 = -0.1 + 0.95 * 0.565 = 0.43675
    rewards, values = t([[0.0, 0.0, 1.0, 0.0]]), t([[0.5, 0.4, 0.3, 9.0]])
    mask = t([[1, 1, 1, 0]])  # the 4th position is padding: its value 9 must not leak in
    adv, ret = ppo.gae(rewards, values, mask, gamma=1.0, lam=0.95)
    assert torch.allclose(adv, t([[0.43675, 0.565, 0.7, 0.0]]), atol=1e-6)
    assert torch.allclose(ret, t([[0.93675, 0.965, 1.0, 0.0]]), atol=1e-6)


def test_gae_loop_matches_closed_form_discounted_sum():
    torch.manual_seed(0)
    rewards, values, mask = torch.randn(2, 5), torch.randn(2, 5), torch.ones(2, 5)
    gamma, lam = 0.9, 0.8
    adv, _ = ppo.gae(rewards, values, mask, gamma, lam)
    nxt = torch.cat([values[:, 1:], torch.zeros(2, 1)], 1)
    delta = rewards + gamma * nxt - values
    expected = torch.stack(
        [sum((gamma * lam) ** (k - s) * delta[:, k] for k in range(s, 5)) for s in range(5)], dim=1
    )
    assert torch.allclose(adv, expected, atol=1e-5)


def test_policy_loss_clipping():
    mask = t([[1.0]])
    loss, stats = ppo.policy_loss(t([[0.5]]), t([[0.0]]), t([[1.0]]), mask, cliprange=0.2)
    # rho = e^0.5 = 1.6487: max(-1.6487, -1.2) = -1.2, clipped
    assert loss.item() == pytest.approx(-1.2)
    assert stats["clipfrac"].item() == 1.0
    loss, stats = ppo.policy_loss(t([[0.5]]), t([[0.0]]), t([[-1.0]]), mask, cliprange=0.2)
    assert loss.item() == pytest.approx(math.exp(0.5))  # max(1.6487, 1.2): unclipped side
    assert stats["clipfrac"].item() == 0.0
    assert stats["approx_kl"].item() == pytest.approx(0.125)


def test_policy_loss_ignores_a_huge_log_ratio_on_a_pad_token():
    # A pad position (mask 0) whose log-ratio overflows exp: the loss and its gradient must stay finite.
    logprobs = t([[-1.0, 500.0]]).requires_grad_()
    loss, stats = ppo.policy_loss(logprobs, t([[-1.0, 0.0]]), t([[1.0, -1.0]]), t([[1.0, 0.0]]), cliprange=0.2)
    loss.backward()
    assert loss.item() == pytest.approx(-1.0) and stats["ratio"].item() == pytest.approx(1.0)
    assert torch.isfinite(logprobs.grad).all() and logprobs.grad[0, 1] == 0.0
    assert ppo.masked_mean(t([[2.0, float("inf")]]), t([[1.0, 0.0]])).item() == 2.0


def test_value_loss_clipping():
    mask = t([[1.0]])
    # V = 1, V_old = 0.5, eps = 0.2 -> clipped V = 0.7
    loss, stats = ppo.value_loss(t([[1.0]]), t([[0.5]]), t([[0.0]]), mask, 0.2)
    assert loss.item() == pytest.approx(0.5 * 1.0) and stats["clipfrac"].item() == 0.0  # max(1, 0.49)
    loss, stats = ppo.value_loss(t([[1.0]]), t([[0.5]]), t([[2.0]]), mask, 0.2)
    assert loss.item() == pytest.approx(0.5 * 1.69) and stats["clipfrac"].item() == 1.0  # max(1, 1.69)


def test_value_clipfrac_counts_only_the_values_that_left_the_clip_range():
    """Values within cliprange_value of the old ones are not clipped, whatever their rounding: near 0 (a fresh value
    head, early returns), V_old + clamp(V - V_old) is not V to the last bit, and counted about one unclipped token in
    nine as clipped. Then exactly the tokens that moved further toward their returns."""
    torch.manual_seed(0)
    old, values, returns = (torch.randn(64, 24) * 0.05 for _ in range(3))
    inside = ((values - old).abs() < 0.2).float()
    assert inside.mean() > 0.99
    assert ppo.value_loss(old, old, returns, inside, 0.2)[1]["clipfrac"].item() == 0.0  # the first mini-batch
    assert ppo.value_loss(values, old, returns, inside, 0.2)[1]["clipfrac"].item() == 0.0
    far = torch.rand(64, 24) < 0.25
    returns = old + 5 * torch.sign(torch.randn(64, 24))
    moved = old + torch.where(far, 0.5, 0.1) * torch.sign(returns - old)  # toward the returns: there the clip binds
    clipfrac = ppo.value_loss(moved, old, returns, torch.ones(64, 24), 0.2)[1]["clipfrac"].item()
    assert clipfrac == pytest.approx(far.float().mean().item())


def test_adaptive_kl_update():
    ctl = ppo.AdaptiveKLController(0.3, target=6.0, horizon=10000)
    ctl.update(12.0, n_steps=256)  # error clipped to +0.2: x (1 + 0.2 * 256 / 10000)
    assert ctl.value == pytest.approx(0.3 * 1.00512)
    ctl = ppo.AdaptiveKLController(0.3, target=6.0, horizon=10000)
    ctl.update(5.4, n_steps=256)  # error -0.1
    assert ctl.value == pytest.approx(0.3 * (1 - 0.1 * 256 / 10000))
    fixed = ppo.FixedKLController(0.3)
    fixed.update(100.0, 256)
    assert fixed.value == 0.3


def test_running_moments_match_batch_statistics():
    m = ppo.RunningMoments()
    m.update(t([1.0, 2.0, 3.0, 4.0]))
    assert (m.mean, m.var, m.std) == pytest.approx((2.5, 1.25, math.sqrt(1.25 * 4 / 3)))
    m.update(t([5.0]))
    all_scores = t([1.0, 2.0, 3.0, 4.0, 5.0])
    assert m.mean == pytest.approx(3.0) and m.var == pytest.approx(2.0)
    assert m.std == pytest.approx(all_scores.std().item())


def test_score_scaling_and_clipping():
    scores = t([1.0, 2.0, 3.0, 4.0])
    std = math.sqrt(1.25 * 4 / 3)
    scaled = ppo.scale_scores(scores, ppo.RunningMoments(), True, False, None)
    assert torch.allclose(scaled, scores / std, atol=1e-5)
    normed = ppo.scale_scores(scores, ppo.RunningMoments(), True, True, None)
    assert torch.allclose(normed, (scores - 2.5) / std, atol=1e-5)
    clipped = ppo.scale_scores(scores, ppo.RunningMoments(), False, False, 2.5)
    assert clipped.tolist() == [1.0, 2.0, 2.5, 2.5]


def test_leave_one_out_baseline_by_hand():
    # two groups of three attempts: [1, 0, 0] and [1, 1, 1]
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    out = ppo.leave_one_out_baseline(scores, 3)
    assert out.tolist() == pytest.approx([1.0, -0.5, -0.5, 0.0, 0.0, 0.0])
    # the same quantity as k / (k - 1) * (s - group mean)
    groups = scores.view(2, 3)
    assert out.tolist() == pytest.approx((1.5 * (groups - groups.mean(1, keepdim=True))).flatten().tolist())
    with pytest.raises(ValueError):
        ppo.leave_one_out_baseline(scores, 4)
    with pytest.raises(ValueError):
        ppo.leave_one_out_baseline(scores, 1)


def test_response_statistics_equal_the_separate_functions_bit_for_bit():
    torch.manual_seed(0)
    logits, ref_logits = torch.randn(3, 5, 11) * 3, torch.randn(3, 5, 11) * 3
    tokens = torch.randint(0, 11, (3, 5))
    got = ppo.response_statistics(logits, ref_logits, tokens)
    want = (ppo.logprobs_of(logits, tokens), ppo.logprobs_of(ref_logits, tokens), ppo.full_kl(logits, ref_logits),
            ppo.entropy_from_logits(logits))
    for a, b in zip(got, want):
        assert a.shape == (3, 5) and torch.equal(a, b)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_token_logprobs_equal_the_log_softmax_ones_with_their_gradients(compiled):
    """ppo.speed.fused_vocab's update path: logit less log-sum-exp, eager or compiled as on a GPU (here inductor on the
    CPU), against trl's log-softmax and gather, values and gradients, from bf16 logits as autocast hands them over."""
    torch.manual_seed(0)
    logits = (torch.randn(3, 5, 67) * 3).bfloat16().requires_grad_()
    tokens = torch.randint(0, 67, (3, 5))
    weights = torch.randn(3, 5)
    fn = torch.compile(ppo.token_logprobs, dynamic=True) if compiled else ppo.token_logprobs
    got = fn(logits, tokens)
    (grad,) = torch.autograd.grad((got * weights).sum(), logits)
    want = ppo.logprobs_of(logits, tokens)
    (want_grad,) = torch.autograd.grad((want * weights).sum(), logits)
    assert got.dtype == torch.float32 and got.shape == (3, 5)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    assert grad.dtype == torch.bfloat16
    torch.testing.assert_close(grad.float(), want_grad.float(), rtol=1e-2, atol=1e-3)  # bf16: one rounding step
    if compiled:  # another response length: the same compiled function, no new one (dynamic shapes)
        fn(logits[:, :3], tokens[:, :3])


def test_compiled_response_statistics_equal_the_eager_ones():
    torch.manual_seed(0)
    logits, ref_logits = (torch.randn(3, 5, 67) * 3).bfloat16(), (torch.randn(3, 5, 67) * 3).bfloat16()
    tokens = torch.randint(0, 67, (3, 5))
    got = torch.compile(ppo.response_statistics, dynamic=True)(logits, ref_logits, tokens)
    for a, b in zip(got, ppo.response_statistics(logits, ref_logits, tokens)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
