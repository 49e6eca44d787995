"""CPU check: a small math LM pretrained with GPT-2's whole vocabulary vs the corpus vocabulary (the same token
sequences): validation loss per token after the same steps, and wall time.

    python -m scripts.vocab_cpu_check          # CPU, ~12 minutes on 2 cores
"""

import random
import time

import torch

import cory.tasks.mathgen as mg
from cory.tasks.config import LMConfig
from cory.tasks.pretrain import build_causal_lm, pretrain_lm
from cory.tasks.config import PretrainConfig
from cory.tasks.tokenizer import corpus_vocabulary, load_tokenizer


def main() -> None:
    torch.set_num_threads(2)
    problems = mg.generate_problems(mg.MathGenConfig())["pretrain"]
    random.Random(0).shuffle(problems)
    held, kept = problems[:500], problems[500:]
    train = mg.pretraining_texts(kept, seed=0, slip_rate=0.5)
    val = [mg.format_example(p) for p in held]
    cfg = PretrainConfig(steps=300, batch_tokens=4096, seq_len=128, learning_rate=2e-3, warmup_steps=30,
                         eval_every=100, eval_tokens=16384)
    shape = LMConfig(n_layer=2, n_embd=128, n_head=4, n_positions=256, dropout=0.1)
    for name, tokenizer in (("corpus", corpus_vocabulary(train)), ("gpt2", load_tokenizer())):
        torch.manual_seed(0)
        model = build_causal_lm(shape, len(tokenizer), tokenizer.eos_token_id)
        start = time.perf_counter()
        result = pretrain_lm(model, tokenizer, train, val, cfg, "cpu")
        curve = [round(h["val_loss"], 4) for h in result["history"] if "val_loss" in h]
        print(name, len(tokenizer), "params", result["params"], f"val_loss {result['val_loss']:.4f}", curve,
              f"{time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
