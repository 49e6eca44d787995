"""Diagnostic: where one base model's pretraining step spends the GPU, alone on the device.

    python -m benchmark.pretrain [--model imdb_large] [--steps 20] [--warmup 5] [--profile-steps 3]

Builds the params' base model (random weights, the profile's `lm` shape and GPT-2's vocabulary, or the size given by
--vocab) and trains it on random token windows exactly as `cory.tasks.pretrain.pretrain_lm` steps (the profile's
`pretrain` settings: batch tokens, micro-batches, regional compilation, fused AdamW, bf16 autocast), then prints its
tokens per second alone (the base_models stage runs its models at once, so its metrics show them sharing the GPU)
and, from torch.profiler over a few steps, the GPU time per step by kind of kernel and the costliest kernels.
`profile_pretraining` runs on a CPU too (tests/test_profile_pretrain.py, a tiny shape); the command needs a GPU.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch

from cory.tasks.pretrain import build_causal_lm, compiled_loss, train_step
from cory.tasks.training import adamw, setup, sync, warmup_cosine
from cory.tasks.config import LMConfig, PretrainConfig
from pipeline.params import load_params

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


def train_steps(model, loss_fn, optimizer, schedule, cfg: PretrainConfig, vocab: int, steps: int, device: str,
                bf16: bool) -> None:
    """`steps` of pretrain_lm's steps on random token windows (bf16 autocast where `_setup` turned it on)."""
    rows = cfg.batch_tokens // cfg.seq_len
    for _ in range(steps):
        window = torch.randint(0, vocab, (rows, cfg.seq_len + 1), device=device)
        train_step(model, loss_fn, window, optimizer, schedule, cfg, bf16)


def profile_pretraining(lm: LMConfig, pre: PretrainConfig, vocab: int, steps: int, warmup: int, profile_steps: int,
                        device: str) -> dict:
    """Train a random model of shape `lm` as pretrain_lm does; returns the seconds of a step alone, tokens per second,
    peak GPU memory (GiB, None on a CPU), and from the profiler the device time a step ({kind: ms}, on a CPU its
    operators' own CPU time) and the costliest kernels [(name, ms a step, calls a step)]."""
    bf16 = setup(device)
    torch.manual_seed(0)
    model = build_causal_lm(lm, vocab, 0).to(device).train()
    optimizer = adamw(model, pre.learning_rate, pre.weight_decay, pre.betas, bf16)
    schedule = warmup_cosine(optimizer, pre.warmup_steps, 10_000, pre.min_lr_ratio)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with compiled_loss(model, pre.compile) as loss_fn:
        started = time.perf_counter()
        train_steps(model, loss_fn, optimizer, schedule, pre, vocab, warmup, device, bf16)
        sync(device)
        warmup_seconds = time.perf_counter() - started
        started = time.perf_counter()
        train_steps(model, loss_fn, optimizer, schedule, pre, vocab, steps, device, bf16)
        sync(device)
        seconds = (time.perf_counter() - started) / steps
        with torch.profiler.profile(activities=activities) as prof:
            train_steps(model, loss_fn, optimizer, schedule, pre, vocab, profile_steps, device, bf16)
            sync(device)
    on = torch.autograd.DeviceType.CUDA if device == "cuda" else torch.autograd.DeviceType.CPU
    events = [e for e in prof.key_averages() if e.device_type == on]
    own = (lambda e: e.self_device_time_total) if device == "cuda" else (lambda e: e.self_cpu_time_total)
    per_kind: dict[str, float] = defaultdict(float)
    for event in events:
        per_kind[kind_of(event.key)] += own(event) / profile_steps / 1e3
    costliest = [(e.key, own(e) / profile_steps / 1e3, e.count // profile_steps)
                 for e in sorted(events, key=own, reverse=True)[:15]]
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "warmup_seconds": warmup_seconds,
        "step_seconds": seconds,
        "tokens_per_second": pre.batch_tokens / seconds,
        "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "busy_ms": dict(per_kind),
        "costliest": costliest,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="imdb_large")
    parser.add_argument("--vocab", type=int, default=GPT2_VOCAB)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile-steps", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("profile_pretrain: needs a GPU (the profile's base models are sized for one)")
    cfg = load_params().base_models[args.model]
    pre = cfg.pretrain
    print(f"profile_pretrain: {args.model} (vocabulary {args.vocab}) on {torch.cuda.get_device_name()}: "
          f"{pre.batch_tokens // pre.seq_len} x {pre.seq_len} tokens a step in {pre.micro_batches} micro-batches, "
          f"compile {pre.compile!r}", flush=True)
    result = profile_pretraining(cfg.lm, pre, args.vocab, args.steps, args.warmup, args.profile_steps, "cuda")
    print(f"{result['params'] / 1e6:.1f}M parameters; warm-up {args.warmup} steps {result['warmup_seconds']:.1f} s "
          f"(compilation included); alone {result['step_seconds'] * 1e3:.1f} ms a step, "
          f"{result['tokens_per_second'] / 1e3:.0f}k tokens per second, peak GPU memory {result['peak_gpu_gib']:.1f} GiB")
    busy = sum(result["busy_ms"].values())
    print(f"GPU busy {busy:.1f} ms a step (profiled), by kind:")
    for kind, ms in sorted(result["busy_ms"].items(), key=lambda item: -item[1]):
        print(f"  {kind:20s} {ms:7.1f} ms  {100 * ms / busy:5.1f}%")
    print("costliest kernels (ms a step, calls a step):")
    for name, ms, calls in result["costliest"]:
        print(f"  {ms:7.2f}  {calls:5d}  {name[:110]}")


if __name__ == "__main__":
    main()
