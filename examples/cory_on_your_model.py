"""CORY and its single-agent PPO baseline on any transformers causal LM, with a reward written in Python.

    python examples/cory_on_your_model.py                      # a tiny random GPT-2 built here, for a CPU
    python examples/cory_on_your_model.py --model gpt2 --iterations 50 --device cuda   # a hub name or a local folder

The task: continue a short movie-review opening; the reward is the share of the response's words that are positive
words. Both methods train the same model from the same seed through the same trainer (`CORYConfig(n_agents=1)` is
PPO), and each saves its trained agents as plain transformers folders that `cory.load_agent` (or
`AutoModelForCausalLM.from_pretrained`) reads back.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from cory import CORYConfig, GenerationConfig, PPOConfig, TrainConfig, Trainer, load_agent

QUERIES = ["This movie was", "I watched it and", "The plot is", "Honestly, the acting", "The ending felt",
           "My friends said it", "The soundtrack", "Two hours of"]
POSITIVE = {"good", "great", "fun", "best", "love", "loved", "wonderful", "beautiful", "nice", "amazing"}


def reward(queries: list[str], responses: list[str], answers: list[str] | None) -> torch.Tensor:
    """The task reward (cory.RewardFn): one float per response, as a (B,) tensor."""
    scores = []
    for response in responses:
        words = [w.strip(".,!?\"'").lower() for w in response.split()]
        scores.append(sum(w in POSITIVE for w in words) / max(len(words), 1))
    return torch.tensor(scores, dtype=torch.float32)


def tiny_gpt2():
    """(model, tokenizer): a 2-layer GPT-2 with random weights, built from a config (nothing to download), on GPT-2's
    BPE cut down to the words of this task, so that even a random model says a positive word now and then."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from cory.tasks.tokenizer import corpus_vocabulary

    tokenizer = corpus_vocabulary([" ".join(QUERIES + sorted(POSITIVE)) + " bad dull long it was and the a"])
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=64, vocab_size=len(tokenizer),
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    return GPT2LMHeadModel(config), tokenizer


def base_model(name: str | None, device: str):
    """(model, tokenizer): `name` from the hub or a folder, else the tiny GPT-2."""
    if name is None:
        lm, tokenizer = tiny_gpt2()
        return lm.to(device), tokenizer
    return load_agent(name, device)  # the model, and its tokenizer with a pad token


def train(n_agents: int, args) -> Path:
    """One run: PPO (n_agents 1) or CORY (2) for args.iterations iterations; returns where LLM1 was saved."""
    random.seed(args.seed)
    torch.manual_seed(args.seed)  # the same initial model and sampling stream for both methods
    lm, tokenizer = base_model(args.model, args.device)
    cfg = TrainConfig(
        iterations=args.iterations, seed=args.seed,
        ppo=PPOConfig(learning_rate=args.learning_rate, batch_size=args.batch_size,
                      mini_batch_size=args.batch_size // 2,
                      generation=GenerationConfig(response_length=(4, 8), suppress_eos=True)),
        # the observer sees the query and the pioneer's answer: a prompt of this task's own
        cory=CORYConfig(n_agents=n_agents, observer_template='A reply: "{query}{response}". A kinder one: {query}'),
    )
    trainer = Trainer(cfg, lm, tokenizer, reward)
    name = "ppo" if n_agents == 1 else "cory"
    for it in range(cfg.iterations):
        batch = random.sample(QUERIES * (1 + cfg.ppo.queries_per_batch // len(QUERIES)), cfg.ppo.queries_per_batch)
        metrics = trainer.step(batch)
        agents = "  ".join(f"{a.name} reward {metrics[f'{a.name}/task_reward']:.3f} KL {metrics[f'{a.name}/kl']:.3f}"
                           for a in trainer.agents)
        print(f"{name} iteration {it}: {agents}", flush=True)
    return trainer.save(Path(args.out) / name)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a causal LM: hub name or local folder (default: a tiny random GPT-2)")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8, help="responses per iteration (ppo.batch_size)")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="trained", help="where each method's agents are saved")
    args = parser.parse_args()
    for n_agents in (1, 2):
        folder = train(n_agents, args)
        model, tokenizer = load_agent(folder, args.device)  # a plain transformers folder
        prompt = tokenizer(QUERIES[:1], return_tensors="pt").to(args.device)
        out = model.generate(**prompt, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        continuation = tokenizer.decode(out[0, prompt.input_ids.shape[1]:])
        print(f"saved {folder}; it continues {QUERIES[0]!r} with {continuation!r}")


if __name__ == "__main__":
    main()
