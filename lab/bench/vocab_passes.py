"""Benchmark: the passes over the vocabulary, side by side in one process, at the default profile's IMDB shape (one
forward chunk: 128 responses x 16 tokens x GPT-2's 50,257 logits, bf16 as autocast hands them over):
  - the experience's per-token statistics (log pi, log pi_ref, full KL, entropy) from the separate functions (six
    log-softmaxes), from cory.rl.ppo.response_statistics (two), and from it compiled (ppo.speed.fused_vocab);
  - the update's token log-probabilities, forward and backward: trl's log-softmax and gather (cory.rl.ppo.logprobs_of)
    against cory.rl.ppo.token_logprobs compiled (ppo.speed.fused_vocab);
and the largest difference of each compiled result from the eager one.

    python -m lab.bench.vocab_passes [--device cuda] [--repeats 3] [--shape B T V]
"""

from __future__ import annotations

import argparse
import time

import torch

from cory.rl import ppo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shape", type=int, nargs=3, default=[128, 16, 50257], metavar=("B", "T", "V"))
    args = parser.parse_args()
    batch, length, vocab = args.shape
    generator = torch.Generator().manual_seed(0)
    logits, ref_logits = (torch.randn(batch, length, vocab, generator=generator).to(args.device, torch.bfloat16)
                          for _ in range(2))
    tokens = torch.randint(0, vocab, (batch, length), generator=generator).to(args.device)
    weights = torch.randn(batch, length, generator=generator).to(args.device)
    statistics = torch.compile(ppo.response_statistics, dynamic=True)
    token_logprobs = torch.compile(ppo.token_logprobs, dynamic=True)

    def update(fn):  # the update's use: log-probs of the sampled tokens, and their gradient into the logits
        leaf = logits.detach().requires_grad_()
        out = fn(leaf, tokens)
        (grad,) = torch.autograd.grad((out * weights).sum(), leaf)
        return out, grad

    ways = {
        "experience: separate functions": lambda: (
            ppo.logprobs_of(logits, tokens), ppo.logprobs_of(ref_logits, tokens), ppo.full_kl(logits, ref_logits),
            ppo.entropy_from_logits(logits)),
        "experience: response_statistics": lambda: ppo.response_statistics(logits, ref_logits, tokens),
        "experience: response_statistics, compiled": lambda: statistics(logits, ref_logits, tokens),
        "update: logprobs_of, forward + backward": lambda: update(ppo.logprobs_of),
        "update: token_logprobs compiled, forward + backward": lambda: update(token_logprobs),
    }
    results = {name: way() for name, way in ways.items()}  # warm-up (compilation), and the values compared below
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    for round_ in range(2):  # both orders' worth: each way twice, alternating
        for name, way in ways.items():
            sync()
            start = time.perf_counter()
            for _ in range(args.repeats):
                way()
            sync()
            print(f"round {round_}: {name}: {(time.perf_counter() - start) / args.repeats * 1e3:.2f} ms")
    pairs = [("experience: response_statistics, compiled", "experience: response_statistics"),
             ("update: token_logprobs compiled, forward + backward", "update: logprobs_of, forward + backward")]
    for compiled, eager in pairs:
        diffs = [(a.float() - b.float()).abs().max().item() for a, b in zip(results[compiled], results[eager])]
        print(f"{compiled} against eager: largest |difference| per output {['%.3g' % d for d in diffs]}")


if __name__ == "__main__":
    main()
