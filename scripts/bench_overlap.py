"""Does CORY's update get faster when its two agents' PPO steps run at once, each on its own CUDA stream?

    python -m scripts.bench_overlap [--model gpt2-large] [--repeats 4] [--profile]

At the paper's GPT-2 Large shape (batch 256, 2-8 query tokens, the observer's prompt from the IMDB template) it
samples one pioneer and one observer rollout of `--response` tokens with random weights, then times, alternately, the
two agents' update phase (make_experience + ppo_update each, the library's) one after the other and in two threads
with a CUDA stream each, on the same two rollouts every time. Scores are random: the update's cost does not depend
on them. Measured once (docs/speed.md, "CORY's two updates at once"): 1.170 s one after the other, 0.966 s at once on
one H200; the same idea inside the trainer, where every iteration brings new shapes, was slower, and was reverted.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time

import torch


def measure(model: str = "gpt2-large", scale: str = "full", device: str = "cuda", repeats: int = 4,
            response: int = 10, batch: int | None = None, profile: bool = False) -> dict[str, list[float]]:
    """Seconds of each repeat: "sequential", "concurrent", "pioneer alone", "observer alone"."""
    from cory.rl.config import TrainConfig
    from cory.schema import from_dict
    from cory.rl.learner import make_experience, ppo_update
    from cory.rl.roles import observer_prompts
    from cory.tasks.standins import make_model, standin_config
    from cory.tasks.tokenizer import load_tokenizer
    from cory.rl.trainer import Trainer
    from pipeline.profile import render
    from scripts.common import queries_of, with_settings

    params = render("paper")
    # sampling is not timed: the dynamic cache spares the static one's compilation
    overrides = {"ppo": {"generation": {"cache": "dynamic"}, **({"batch_size": batch, "mini_batch_size": batch}
                                                                 if batch else {})}}
    cfg = with_settings(from_dict(TrainConfig, params["train"], "train"), overrides)
    torch.manual_seed(0)
    lm = make_model(model, standin_config(model, scale)).to(device)
    tokenizer = load_tokenizer()  # GPT-2 BPE, offline, padded on the left for generation
    trainer = Trainer(cfg, lm, tokenizer, lambda q, r, a: torch.randn(len(q)), seed=0)
    llm1, llm2 = trainer.agents
    queries, _ = queries_of("sentiment", cfg.ppo.batch_size)
    template = params["tasks"]["imdb"]["observer_template"]
    pioneer = trainer._generate(llm1, [cfg.prompt_template.format(query=q) for q in queries], response)
    observer = trainer._generate(llm2, observer_prompts(template, queries, pioneer.responses), response)
    print(f"{model}: pioneer rollout {tuple(pioneer.prompt_ids.shape)} + {tuple(pioneer.response_ids.shape)}, "
          f"observer {tuple(observer.prompt_ids.shape)} + {tuple(observer.response_ids.shape)}", flush=True)
    scores = torch.randn(cfg.ppo.batch_size)
    work = [(llm1, pioneer), (llm2, observer)]

    def one(agent, rollout):
        exp = make_experience(agent, trainer.ref_lm, rollout, scores)
        return ppo_update(agent, exp)

    def sequential():
        for agent, rollout in work:
            one(agent, rollout)

    gpu = torch.device(device).type == "cuda"
    streams = [torch.cuda.Stream() if gpu else None for _ in work]
    sync = torch.cuda.synchronize if gpu else (lambda: None)

    def concurrent():
        main_stream = torch.cuda.current_stream() if gpu else None
        errors = []

        def run(stream, agent, rollout):
            try:
                if gpu:
                    stream.wait_stream(main_stream)
                with torch.cuda.stream(stream) if gpu else contextlib.nullcontext():
                    one(agent, rollout)
            except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s, a, r)) for s, (a, r) in zip(streams, work)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in streams if gpu else []:
            main_stream.wait_stream(s)
        if errors:
            raise errors[0]

    def timed(fn):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start

    for fn in (sequential, concurrent, sequential):  # warm-up: allocator, compiled vocabulary passes
        timed(fn)
    times = {"sequential": [], "concurrent": [], "pioneer alone": [], "observer alone": []}
    for _ in range(repeats):
        times["sequential"].append(timed(sequential))
        times["concurrent"].append(timed(concurrent))
        times["pioneer alone"].append(timed(lambda: one(*work[0])))
        times["observer alone"].append(timed(lambda: one(*work[1])))
    for name, values in times.items():
        print(f"{name}: mean {statistics.mean(values):.3f} s, median {statistics.median(values):.3f} s "
              f"({', '.join(f'{v:.3f}' for v in values)})", flush=True)
    if gpu:
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
    if profile and gpu:
        from scripts.common import profile_iteration

        for name, fn in (("pioneer alone", lambda: one(*work[0])), ("sequential", sequential)):
            print(f"--- {name} under the profiler", flush=True)
            print(profile_iteration(fn, statistics.mean(times[name])).split("\n")[0], flush=True)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gpt2-large")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--response", type=int, default=10, help="response tokens of both rollouts")
    parser.add_argument("--batch", type=int, default=None, help="rollout rows (default: the paper profile's 256)")
    parser.add_argument("--profile", action="store_true", help="also the GPU-busy time of one update")
    parser.add_argument("--scale", default="full", help="tiny: toy sizes, for a CPU check of the script")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    measure(args.model, args.scale, args.device, args.repeats, args.response, args.batch, args.profile)


if __name__ == "__main__":
    main()
