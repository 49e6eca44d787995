"""Benchmark: one sampling call of a run's pioneer, with each way of decoding, side by side in one process.

    python -m benchmark.decode [--group math] [--run cory] [--calls 10] [--warmup 3]     (from the project root)

Builds the profile's run on random weights of its shapes (as benchmark/rl.py does), formats its pioneer prompts
(the batch of one iteration) and times `cory.rl.rollout.generate` for its response length with
`generate` and a dynamic cache, `generate` and a static cache (transformers compiles its forward pass), and
`cache: graph` (cory.rl.decoding, the whole step as one CUDA graph) with and without its cuDNN attention preference, printing seconds per call (after `--warmup` calls, which hold any compilation), the GPU-busy time of one profiled
call (the sum of its kernels) and its kernel launches (with --kernels N, the N busiest kernels). Nothing is written. It needs a GPU to say anything useful.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from cory.rl import decoding, kernels, rollout
    from cory.rl.kernels import bf16_copy
    from benchmark.rl import build

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", default="math")
    parser.add_argument("--run", default="cory")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--kernels", type=int, default=0, help="also print the profiled call's N busiest kernels")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg, lm, tokenizer, _, queries, _ = build(args.group, args.run, Path(tmp))
    gen = cfg.ppo.generation
    k = cfg.ppo.samples_per_query  # the trainer samples each query k times: the batch of one iteration
    prompts = [cfg.prompt_template.format(query=q) for q in queries for _ in range(k)]
    max_new = gen.response_length[1]
    if cfg.ppo.speed.bf16_weights:
        lm = bf16_copy(lm)  # the agents sample on their bf16 copies, without autocast
    device = next(lm.parameters()).device
    kernels.configure_gpu_for_rl(device)  # as the train stage's processes: no cuDNN attention outside the decoding step

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
    print(f"bench_decode: {args.group}/{args.run} pioneer, {len(prompts)} prompts x {max_new} new tokens on "
          f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}", flush=True)
    # The graph rows: with cory.rl.decoding.decoding_attention (cuDNN's kernel inside the decoding loop), without it (the
    # kernel the RL processes choose elsewhere, cuDNN's turned off by cory.rl.kernels.configure_gpu_for_rl), and with it
    # again (an order effect shows as a difference between the first and the last). Each graph row compiles its own
    # step, without torch.compile's caches: their keys leave the attention backend out (pytorch/pytorch#185449), so a
    # row would get an earlier row's compiled step, kernel and all (in an H100 call of commit c31137c, with the caches
    # on, the row without the preference ran cuDNN's kernel too).
    prefer_cudnn = decoding.decoding_attention
    rows = [("dynamic", None), ("static", None), ("graph", prefer_cudnn), ("graph", contextlib.nullcontext),
            ("graph", prefer_cudnn)]
    for cache, attention in rows:
        label, config = f"cache: {cache}", replace(gen, cache=cache)
        if attention is not None:
            label += ", cuDNN attention" if attention is prefer_cudnn else ", default attention"
            lm.__dict__.pop(decoding.GRAPH_DECODERS, None)  # decoders are kept per shape: build new ones
            torch._dynamo.reset()  # and compile the step again, from nothing
            torch._inductor.config.force_disable_caches = True
            decoding.decoding_attention = attention

        def call():
            return rollout.generate(lm, tokenizer, prompts, config, max_new, mixed_precision=cfg.ppo.speed.autocast)

        started = time.perf_counter()
        for _ in range(args.warmup):
            call()
        sync()
        warmup = time.perf_counter() - started
        seconds = []
        for _ in range(args.calls):
            started = time.perf_counter()
            out = call()
            sync()
            seconds.append(time.perf_counter() - started)
        busy, busiest = "", []
        if device.type == "cuda":
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                call()
                torch.cuda.synchronize()
            kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
            busy = (f", GPU busy {sum(e.self_device_time_total for e in kernels) / 1e3:.1f} ms in "
                    f"{sum(e.count for e in kernels)} launches")
            busiest = [f"    {e.self_device_time_total / 1e3:8.2f} ms {e.count:6d} x  {e.key[:110]}"
                       for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[: args.kernels]]
        print(f"[{label}] {statistics.mean(seconds):.4f} s per call (median {statistics.median(seconds):.4f}), "
              f"{out.response_ids.shape[1]} tokens ({out.response_ids.unique().numel()} distinct ids){busy}, "
              f"warm-up {warmup:.1f} s", flush=True)
        if busiest:
            print("\n".join(busiest), flush=True)


if __name__ == "__main__":
    main()
