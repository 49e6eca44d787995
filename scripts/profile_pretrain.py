"""Diagnostic: where one base model's pretraining step spends the GPU, alone on the device.

    python -m scripts.profile_pretrain [--model imdb_large] [--steps 20] [--warmup 5] [--profile-steps 3]

Builds the params' base model (random weights, the profile's `lm` shape and GPT-2's vocabulary, or the size given by
--vocab) and trains it on random token windows exactly as `cory.pretrain.pretrain_lm` steps (the profile's
`pretrain` settings: batch tokens, micro-batches, regional compilation, fused AdamW, bf16 autocast), then prints its
tokens per second alone (the base_models stage runs its models at once, so its metrics show them sharing the GPU)
and, from torch.profiler over a few steps, the GPU time per step by kind of kernel and the costliest kernels.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch

from cory.pretrain import _adamw, _optimizer_step, _setup, _warmup_cosine, build_causal_lm, compiled_loss
from cory.settings import LMConfig, PretrainConfig
from pipeline.common import load_params, section
from pipeline.params import BaseModelConfig

GPT2_VOCAB = 50257

KINDS = (  # (kind, substrings of a kernel's name), the first match wins
    ("matmul", ("gemm", "cutlass", "sm90_xmma", "nvjet", "ampere_", "sm80_xmma")),
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    ("optimizer", ("adam", "multi_tensor")),
    ("triton (compiled)", ("triton",)),
)


def kind_of(name: str) -> str:
    lowered = name.lower()
    for kind, parts in KINDS:
        if any(part in lowered for part in parts):
            return kind
    return "other (eager)"


def train_steps(model, loss_fn, optimizer, schedule, rows: int, seq_len: int, cfg: PretrainConfig, vocab: int,
                steps: int, device: str) -> None:
    for _ in range(steps):
        window = torch.randint(0, vocab, (rows, seq_len + 1), device=device)
        for part in window.chunk(cfg.micro_batches):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model, part) / cfg.micro_batches
            loss.backward()
        _optimizer_step(model, optimizer, schedule, cfg.grad_clip)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="imdb_large")
    parser.add_argument("--vocab", type=int, default=GPT2_VOCAB)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile-steps", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("profile_pretrain: needs a GPU")
    params = load_params()
    cfg = section(params, f"base_models.{args.model}", BaseModelConfig)
    lm_cfg: LMConfig = cfg.lm
    pre: PretrainConfig = cfg.pretrain
    device = "cuda"
    _setup(device)
    torch.manual_seed(0)
    model = build_causal_lm(lm_cfg, args.vocab, 0).to(device).train()
    optimizer = _adamw(model, pre.learning_rate, pre.weight_decay, pre.betas, True)
    schedule = _warmup_cosine(optimizer, pre.warmup_steps, 10_000, pre.min_lr_ratio)
    rows = pre.batch_tokens // pre.seq_len
    print(f"profile_pretrain: {args.model} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
          f"vocabulary {args.vocab}) on {torch.cuda.get_device_name()}: {rows} x {pre.seq_len} tokens a step in "
          f"{pre.micro_batches} micro-batches, compile {pre.compile!r}", flush=True)
    with compiled_loss(model, pre.compile) as loss_fn:
        started = time.perf_counter()
        train_steps(model, loss_fn, optimizer, schedule, rows, pre.seq_len, pre, args.vocab, args.warmup, device)
        torch.cuda.synchronize()
        print(f"warm-up: {args.warmup} steps in {time.perf_counter() - started:.1f} s (compilation included)", flush=True)
        started = time.perf_counter()
        train_steps(model, loss_fn, optimizer, schedule, rows, pre.seq_len, pre, args.vocab, args.steps, device)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - started) / args.steps
        print(f"alone: {seconds * 1e3:.1f} ms a step, {pre.batch_tokens / seconds / 1e3:.0f}k tokens per second, "
              f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            train_steps(model, loss_fn, optimizer, schedule, rows, pre.seq_len, pre, args.vocab, args.profile_steps,
                        device)
            torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    per_kind, total = defaultdict(float), 0.0
    for event in kernels:
        us = event.self_device_time_total
        per_kind[kind_of(event.key)] += us
        total += us
    steps = args.profile_steps
    print(f"GPU busy {total / steps / 1e3:.1f} ms a step (profiled; of {seconds * 1e3:.1f} ms wall), by kind:")
    for kind, us in sorted(per_kind.items(), key=lambda item: -item[1]):
        print(f"  {kind:20s} {us / steps / 1e3:7.1f} ms  {100 * us / total:5.1f}%")
    print("costliest kernels (ms a step, calls a step):")
    for event in sorted(kernels, key=lambda e: -e.self_device_time_total)[:15]:
        print(f"  {event.self_device_time_total / steps / 1e3:7.2f}  {event.count // steps:5d}  {event.key[:110]}")


if __name__ == "__main__":
    main()
