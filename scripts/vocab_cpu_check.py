"""`python -m scripts.vocab_cpu_check` (CPU, ~12 minutes on 2 cores). CPU check: a small math LM pretrained with GPT-2's whole vocabulary vs the corpus vocabulary (same token
sequences): validation loss per token after the same steps, and wall time."""
import random, time, torch
import cory.mathgen as mg
from cory.pretrain import LMConfig, build_causal_lm, pretrain_lm
from cory.settings import PretrainConfig
from cory.tokenizer import corpus_vocabulary, load_tokenizer
torch.set_num_threads(2)
problems = mg.generate_problems(mg.MathGenConfig())["pretrain"]
random.Random(0).shuffle(problems)
held, kept = problems[:500], problems[500:]
train = mg.pretraining_texts(kept, seed=0, slip_rate=0.5)
val = [mg.format_example(p) for p in held]
cfg = PretrainConfig(steps=300, batch_tokens=4096, seq_len=128, learning_rate=2e-3, warmup_steps=30, eval_every=100,
                     eval_tokens=16384)
for name, tok in (("corpus", corpus_vocabulary(train)), ("gpt2", load_tokenizer())):
    torch.manual_seed(0)
    model = build_causal_lm(LMConfig(n_layer=2, n_embd=128, n_head=4, n_positions=256, dropout=0.1), len(tok), tok.eos_token_id)
    t = time.perf_counter()
    r = pretrain_lm(model, tok, train, val, cfg, "cpu")
    print(name, len(tok), "params", r["params"], "val_loss %.4f" % r["val_loss"],
          [round(h["val_loss"], 4) for h in r["history"] if "val_loss" in h], "%.0f s" % (time.perf_counter() - t), flush=True)
