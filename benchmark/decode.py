"""Benchmark: one sampling call of a run's pioneer, with each way of decoding, side by side in one process.

    python -m benchmark.decode [--group math] [--run cory] [--calls 10] [--warmup 3] [--kernels N]
                               [--rows dynamic static graph default-attention] [--cache-lengths 0 1024]
                               [--adapters-off] [--set ppo.KEY=VALUE ...]        (from the project root)

A run whose base model is trained by the pipeline is built on random weights of its shapes (as benchmark/rl.py does);
one whose base model has a `source` (a large profile's stand-in or hub model) is loaded from it and its Trainer built
as benchmark/paper.py does (LoRA adapters, a 4-bit base and its speed settings included), and its first agent samples.
The pioneer prompts of one iteration are timed through `cory.rl.rollout.generate` for the run's response length with
each row: `generate` and a dynamic cache, `generate` and a static cache (transformers compiles its forward pass), and
`cache: graph` (cory.rl.decoding, the whole step as one CUDA graph) with and without its cuDNN attention preference,
once per `--cache-lengths` value (generation.cache_length: 0 is the prompt + response rounded up to 64 tokens), and
with `--adapters-off` once more with the LoRA adapters switched off (their share of a step). It prints seconds per
call and per decoding step (after `--warmup` calls, which hold any compilation), the GPU-busy time of one profiled call
(the sum of its kernels) and its kernel launches (with --kernels N, the N busiest kernels). Nothing is written. It
needs a GPU to say anything useful.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path


ROWS = ("dynamic", "static", "graph", "default-attention")


def pioneer(params, job, overrides: dict, work: Path):
    """(train config, the LM its first agent samples with, tokenizer, queries) of one run (`job`) of the params."""
    from benchmark.common import queries_of, with_settings
    from benchmark.paper import load_run
    from benchmark.rl import build
    from pipeline.common import device
    from cory.tasks.config import SCRATCH

    if params.base_models[job.model].source == SCRATCH:  # pretrained by the pipeline: random weights of its shapes
        cfg, lm, tokenizer, _, queries, _ = build(job.group, job.run, work)
        cfg = with_settings(cfg, overrides)
        if cfg.ppo.speed.bf16_weights:
            from cory.rl.kernels import bf16_copy

            lm = bf16_copy(lm)  # the agents sample on their bf16 copies, without autocast
        return cfg, lm, tokenizer, queries
    trainer, _, _ = load_run(job, params, overrides, device())
    agent = trainer.agents[0]
    agent.activate()
    return trainer.cfg, agent.compute_lm, trainer.tokenizer, queries_of(job.task.reward,
                                                                         trainer.cfg.ppo.queries_per_batch)[0]


def main(argv: list[str] | None = None) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmark.common import first_seed_job, with_settings
    from cory.rl import decoding, kernels, rollout
    from cory.schema import dotted_tree
    from pipeline.params import load_params

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", default="math")
    parser.add_argument("--run", default="cory")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--kernels", type=int, default=0, help="also print the profiled call's N busiest kernels")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS),
                        help="the ways of decoding to time (default: all; graph runs twice, first and last)")
    parser.add_argument("--cache-lengths", nargs="+", type=int, default=None,
                        help="the graph rows once per generation.cache_length (default: the run's own)")
    parser.add_argument("--adapters-off", action="store_true",
                        help="one more graph row with the LoRA adapters switched off (a run with adapters)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a train setting over the run's own, e.g. ppo.generation.cache_length=1024")
    args = parser.parse_args(argv)
    overrides = dotted_tree(args.set)
    params = load_params()  # params.yaml, or $CORY_PARAMS
    job = first_seed_job(params, args.group, args.run)
    if job is None:
        runs = sorted({f"{job.group}/{job.run}" for group in params.jobs.values() for job in group})
        parser.error(f"--group/--run: the params have no run {args.group}/{args.run}; they have {', '.join(runs)}")
    if args.adapters_off and not with_settings(job.train, overrides).lora_rank:
        parser.error(f"--adapters-off: {args.group}/{args.run} has no LoRA adapters (train.lora_rank)")
    with tempfile.TemporaryDirectory() as tmp:
        cfg, lm, tokenizer, queries = pioneer(params, job, overrides, Path(tmp))
    gen = cfg.ppo.generation
    k = cfg.ppo.samples_per_query  # the trainer samples each query k times: the batch of one iteration
    prompts = [cfg.prompt_template.format(query=q) for q in queries for _ in range(k)]
    max_new = gen.response_length[1]
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
    lengths = args.cache_lengths or [gen.cache_length]
    rows = [(cache, None, None, False) for cache in ("dynamic", "static") if cache in args.rows]
    for length in lengths:
        if "graph" in args.rows:
            rows.append(("graph", prefer_cudnn, length, False))
        if "default-attention" in args.rows:
            rows.append(("graph", contextlib.nullcontext, length, False))
    if "graph" in args.rows and "default-attention" in args.rows:
        rows.append(("graph", prefer_cudnn, lengths[0], False))
    if args.adapters_off:
        rows.append(("graph", prefer_cudnn, lengths[0], True))
    for cache, attention, length, adapters_off in rows:
        label, config = f"cache: {cache}", replace(gen, cache=cache)
        if attention is not None:
            config = replace(config, cache_length=length)
            label += ", cuDNN attention" if attention is prefer_cudnn else ", default attention"
            label += f", cache_length {length}" + (", adapters off" if adapters_off else "")
            lm.__dict__.pop(decoding.GRAPH_DECODERS, None)  # decoders are kept per shape: build new ones
            torch._dynamo.reset()  # and compile the step again, from nothing
            torch._inductor.config.force_disable_caches = True
            decoding.decoding_attention = attention

        def call():
            with lm.disable_adapter() if adapters_off else contextlib.nullcontext():
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
            launched = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
            busy = (f", GPU busy {sum(e.self_device_time_total for e in launched) / 1e3:.1f} ms in "
                    f"{sum(e.count for e in launched)} launches")
            busiest = [f"    {e.self_device_time_total / 1e3:8.2f} ms {e.count:6d} x  {e.key[:110]}"
                       for e in sorted(launched, key=lambda e: -e.self_device_time_total)[: args.kernels]]
        steps = out.response_ids.shape[1]
        print(f"[{label}] {statistics.mean(seconds):.4f} s per call (median {statistics.median(seconds):.4f}; "
              f"{1e3 * statistics.mean(seconds) / steps:.2f} ms per step), {steps} tokens "
              f"({out.response_ids.unique().numel()} distinct ids){busy}, warm-up {warmup:.1f} s", flush=True)
        if busiest:
            print("\n".join(busiest), flush=True)


if __name__ == "__main__":
    main()
