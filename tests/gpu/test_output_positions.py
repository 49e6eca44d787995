"""On a GPU: the output layer on the T predicting positions (`logits_to_keep` as positions,
cory.rl.rollout.forward_response) gives the logits and gradients of the old way (the last T+1 positions, the last one
sliced off), at the default profile's IMDB model shape under the RL runs' bf16 autocast: the logits identical, the
gradients within a bf16 rounding step of the largest (the output layer's weight gradient is a matmul over B x T
instead of B x (T+1) rows, summed in another order)."""

import pytest
import torch

from cory.rl.decoding import position_ids
from cory.rl.kernels import autocast
from cory.tasks.config import LMConfig
from cory.tasks.pretrain import build_causal_lm


@pytest.mark.parametrize("B, P, T", [(128, 8, 16), (128, 40, 16), (128, 60, 80)])  # IMDB pioneer, observer, math-like
def test_the_predicting_positions_give_the_old_logits_and_gradients(B, P, T):
    device = torch.device("cuda")
    torch.manual_seed(0)
    lm = build_causal_lm(LMConfig(n_layer=6, n_embd=384, n_head=6, n_positions=256, dropout=0.0), 50257, 50256)
    lm.to(device)
    ids = torch.randint(0, 50257, (B, P + T), device=device)
    mask = torch.ones_like(ids)
    mask[: B // 2, : P // 2] = 0  # left padding in half the rows
    L = P + T
    results = []
    for keep in (T + 1, torch.arange(L - T - 1, L - 1, device=device)):  # before, after
        lm.zero_grad()
        with autocast(device, True):
            logits = lm(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask),
                        logits_to_keep=keep, use_cache=False).logits
        if isinstance(keep, int):
            logits = logits[:, :-1]
        torch.log_softmax(logits.float(), -1).mean().backward()
        results.append((logits.detach().float(), [p.grad.detach().clone() for p in lm.parameters()]))
    (a, grads_a), (b, grads_b) = results
    assert torch.equal(a, b)
    largest = max(g.abs().max().item() for g in grads_a)
    assert max((x - y).abs().max().item() for x, y in zip(grads_a, grads_b)) <= 0.01 * largest
