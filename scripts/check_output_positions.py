"""Check: the output layer on the T predicting positions (`logits_to_keep` as positions, cory.rl.rollout.forward_response)
gives the logits and gradients of the old way (the last T+1 positions, the last one sliced off), at the default
profile's IMDB model shape under the RL runs' bf16 autocast.

    python -m scripts.check_output_positions        (from the project root; on a GPU, or slowly on the CPU)

Prints, per (batch, prompt tokens, response tokens), the largest difference of the logits and of any parameter's
gradient of a log-softmax loss, and the largest gradient for scale. Measured 2026-11-28 on one H200: logits identical,
gradients within 7.6e-6 where the largest is 2.1e-3 (one bf16 rounding step: the output layer's weight gradient is a
matmul over B x T instead of B x (T+1) rows, summed in another order); on the CPU within 1.5e-11.
"""

import torch

from cory.tasks.pretrain import build_causal_lm
from cory.rl.decoding import position_ids
from cory.rl.kernels import autocast
from cory.tasks.config import LMConfig


def main() -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    lm = build_causal_lm(LMConfig(n_layer=6, n_embd=384, n_head=6, n_positions=256, dropout=0.0), 50257, 50256)
    lm.to(device)
    for B, P, T in ((128, 8, 16), (128, 40, 16), (128, 60, 80)):  # IMDB pioneer, IMDB observer, a math-like length
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
        grad_diff = max((x - y).abs().max().item() for x, y in zip(grads_a, grads_b))
        largest = max(g.abs().max().item() for g in grads_a)
        print(f"B {B}, P {P}, T {T}: logits max |diff| {(a - b).abs().max().item()} (identical: {torch.equal(a, b)}), "
              f"gradients max |diff| {grad_diff:.3g}, largest gradient {largest:.3g}")


if __name__ == "__main__":
    main()
