"""Benchmark: the experience's per-token statistics (log pi, log pi_ref, full KL, entropy) from the separate functions
(six log-softmaxes over the vocabulary) against cory.ppo.response_statistics (two), side by side in one process, at
the default profile's IMDB shape (one forward chunk: 128 responses x 16 tokens x GPT-2's 50,257 logits, bf16).

    python -m scripts.bench_vocab_passes [--device cuda] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from cory import ppo


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
    ways = {
        "separate functions": lambda: (ppo.logprobs_of(logits, tokens), ppo.logprobs_of(ref_logits, tokens),
                                       ppo.full_kl(logits, ref_logits), ppo.entropy_from_logits(logits)),
        "response_statistics": lambda: ppo.response_statistics(logits, ref_logits, tokens),
    }
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    for way in ways.values():
        way()  # warm-up
    for round_ in range(2):  # both orders' worth: each way twice, alternating
        for name, way in ways.items():
            sync()
            start = time.perf_counter()
            for _ in range(args.repeats):
                way()
            sync()
            print(f"round {round_}: {name}: {(time.perf_counter() - start) / args.repeats * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
