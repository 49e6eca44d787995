"""Small language models trained from scratch: the base models (the reward classifier is in cory.tasks.classifier).

No pretrained GPT-2 or sentiment classifier is reachable offline (README, "Offline sources"), so the pipeline trains GPT-2
shaped stand-ins: causal LMs on IMDB reviews (for GPT2-Large / GPT2-XL) and on math text, and a GPT-2 sequence
classifier (for `lvwerra/distilbert-imdb`), optionally started from the IMDB LM's body. Everything is saved with
`save_pretrained` (safetensors) next to its tokenizer, so plain `transformers` `Auto*.from_pretrained(dir)` loads it.

Speed (the stages have a minute or two of GPU): the corpus is packed into one token stream that lives on the device
and batches are random contiguous windows gathered there; bf16 autocast, TF32 and fused AdamW on CUDA; no host sync
inside the loop except at evaluations; optional `torch.compile`, of the whole loss or of each block (`compiled_loss`).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from cory.hf import NO_ATTENTION_MASK, count_parameters, expected_warnings, transformer_blocks
from cory.schema import ConfigError
from cory.tasks.config import LMConfig, PretrainConfig
from cory.tasks.tokenizer import encode
from cory.tasks.training import adamw, optimizer_step, setup, sync, warmup_cosine


ID2LABEL = {0: "NEGATIVE", 1: "POSITIVE"}
"""The label names of `lvwerra/distilbert-imdb`, so the reward reads the POSITIVE logit the same way (docs/algorithm.md)."""


def gpt2_config(cfg: LMConfig, vocab_size: int, eos_token_id: int, **extra) -> GPT2Config:
    return GPT2Config(
        vocab_size=vocab_size,
        n_positions=cfg.n_positions,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        activation_function="gelu_pytorch_tanh",  # GPT-2's tanh GELU as one fused kernel (HF's gelu_new is ~8 ops)
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,  # GPT-2 has no pad token; padding with EOS is what TRL does
        **extra,
    )


def build_causal_lm(cfg: LMConfig, vocab_size: int, eos_token_id: int) -> GPT2LMHeadModel:
    """A randomly initialised GPT-2 LM (tied input/output embeddings)."""
    return GPT2LMHeadModel(gpt2_config(cfg, vocab_size, eos_token_id))


def train_step(model, loss_fn, window: torch.Tensor, optimizer, schedule, cfg: PretrainConfig, bf16: bool
               ) -> torch.Tensor:
    """One optimizer step on a (rows, T+1) window of tokens: the backward pass of each of its `cfg.micro_batches`
    equal slices (bf16 autocast where `bf16`), then `optimizer_step`; returns the step's loss, the mean of the slices',
    on the device (no host sync)."""
    step_loss = torch.zeros((), device=window.device)
    for part in window.chunk(cfg.micro_batches):
        with torch.autocast(window.device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model, part) / cfg.micro_batches
        loss.backward()
        step_loss += loss.detach()
    optimizer_step(model, optimizer, schedule, cfg.grad_clip)
    return step_loss


def pack(tokenizer, texts: list[str]) -> torch.Tensor:
    """All texts as one token stream, each followed by EOS. (N,) int64."""
    ids, offsets = encode(tokenizer, texts)
    eos_at = offsets[1:] + np.arange(len(texts))  # each text's end, shifted by the EOS tokens before it
    stream = np.full(len(ids) + len(texts), tokenizer.eos_token_id, dtype=np.int64)
    keep = np.ones(len(stream), dtype=bool)
    keep[eos_at] = False
    stream[keep] = ids
    return torch.from_numpy(stream)


def output_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, reduction: str = "mean"
                ) -> torch.Tensor:
    """Next-token cross-entropy of `targets` (B, T) from the body's `hidden` states (B, T, H) through the output
    embedding `weight` (V, H), without a bias.

    The output layer runs on a vocabulary padded to a multiple of 64 whose extra logits get a -1e4 bias (zero
    probability, so the loss is exactly the unpadded one): with GPT-2's odd 50,257 rows cuBLAS falls back to slow
    unaligned kernels, which made the output-layer matmuls ~4x and whole training steps ~1.5x slower on an H200.
    """
    pad = -weight.shape[0] % 64
    bias = torch.zeros(weight.shape[0] + pad, device=weight.device)
    bias[weight.shape[0] :] = -1e4
    logits = F.linear(hidden, F.pad(weight, (0, 0, 0, pad)), bias)  # (B, T, V + pad)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction=reduction)


def lm_loss(model, window: torch.Tensor, reduction: str = "mean", head=output_loss) -> torch.Tensor:
    """Next-token cross-entropy of the token windows `window` (B, T+1) under a HF causal LM without a head bias;
    `head` computes the output layer and the loss (`output_loss`, or a compiled one)."""
    # no KV cache: training never reads it, and its per-layer state would make each compiled block recompile
    hidden = model.base_model(input_ids=window[:, :-1], use_cache=False).last_hidden_state  # (B, T, H)
    return head(hidden, model.get_output_embeddings().weight, window[:, 1:], reduction)


@contextmanager
def compiled_loss(model, mode: bool | str):
    """The loss function of `pretrain_lm` under `pretrain.compile`'s `mode`: False, eager; True, the whole loss (body,
    output layer, loss) as one graph; "regional", each transformer block compiled in place (one compilation that every
    block of the model reuses, so the first step compiles in a fraction of the whole graph's time) and the output
    layer with the loss on their own. The blocks are eager again when the context ends."""
    if not mode:
        yield lm_loss
    elif mode is True:
        yield torch.compile(lm_loss)
    else:
        blocks = transformer_blocks(model, "pretrain.compile")
        for block in blocks:
            block.compile()
        try:
            yield partial(lm_loss, head=torch.compile(output_loss))
        finally:
            for block in blocks:
                block._compiled_call_impl = None  # what nn.Module.compile set: the block's forward is eager again


@torch.no_grad()
def evaluate_lm(model, stream: torch.Tensor, seq_len: int, rows: int, max_tokens: int, bf16: bool) -> float:
    """Mean next-token loss over consecutive windows of `stream` (on the model's device), up to `max_tokens`."""
    was_training = model.training
    model.eval()
    n = min(max_tokens, len(stream) - 1) // seq_len
    if n == 0:
        raise ValueError(f"validation stream of {len(stream)} tokens is shorter than one window of {seq_len + 1}")
    # window i = stream[i*T : (i+1)*T + 1]: consecutive windows overlap by the one token each one predicts last
    windows = stream[: n * seq_len + 1].unfold(0, seq_len + 1, seq_len)  # (n, T+1)
    total = torch.zeros((), device=stream.device)
    for start in range(0, n, rows):
        with torch.autocast(stream.device.type, dtype=torch.bfloat16, enabled=bf16):
            total += lm_loss(model, windows[start : start + rows], reduction="sum")
    model.train(was_training)
    return total.item() / (n * seq_len)


def pretrain_lm(model, tokenizer, train_texts: list[str], val_texts: list[str], cfg: PretrainConfig, device: str) -> dict:
    """Train `model` in place on random windows of the packed `train_texts`; returns metrics and a loss history."""
    started = time.perf_counter()
    if cfg.seq_len > model.config.n_positions:
        raise ConfigError(f"pretrain.seq_len: {cfg.seq_len} exceeds the model's n_positions {model.config.n_positions}")
    bf16 = setup(device)
    torch.manual_seed(cfg.seed)
    train_stream = pack(tokenizer, train_texts).to(device)  # (N,)
    val_stream = pack(tokenizer, val_texts).to(device)  # (M,)
    if len(train_stream) <= cfg.seq_len + 1:
        raise ValueError(f"training stream of {len(train_stream)} tokens is shorter than one window of {cfg.seq_len + 1}")
    rows = cfg.batch_tokens // cfg.seq_len
    steps = cfg.steps or math.ceil(cfg.epochs * len(train_stream) / cfg.batch_tokens)
    model.to(device).train()
    optimizer = adamw(model, cfg.learning_rate, cfg.weight_decay, cfg.betas, bf16)
    schedule = warmup_cosine(optimizer, cfg.warmup_steps, steps, cfg.min_lr_ratio)
    sampler = torch.Generator(device=device).manual_seed(cfg.seed)
    offsets = torch.arange(cfg.seq_len + 1, device=device)  # (T+1,)
    sync(device)
    prepared = time.perf_counter()

    history, running, eval_seconds, last_eval = [], torch.zeros((), device=device), 0.0, 0
    first_step_seconds = None
    # packed windows, no padding: the EOS between texts is the pad id, which transformers takes for padding
    with compiled_loss(model, cfg.compile) as loss_fn, expected_warnings(NO_ATTENTION_MASK):  # pretrain.compile
        for step in range(1, steps + 1):
            starts = torch.randint(0, len(train_stream) - cfg.seq_len, (rows, 1), device=device, generator=sampler)
            window = train_stream[starts + offsets]  # (rows, T+1)
            running += train_step(model, loss_fn, window, optimizer, schedule, cfg, bf16)  # on the device: no sync
            if step == 1:  # the first step holds any compilation (one sync, to time it)
                sync(device)
                first_step_seconds = time.perf_counter() - prepared

            if step % cfg.eval_every == 0 or step == steps:
                eval_started = time.perf_counter()
                val_loss = evaluate_lm(model, val_stream, cfg.seq_len, rows, cfg.eval_tokens, bf16)
                history.append(
                    {
                        "step": step,
                        "train_loss": running.item() / (step - last_eval),
                        "val_loss": val_loss,
                        "lr": schedule.get_last_lr()[0],
                        "seconds": time.perf_counter() - prepared,
                    }
                )
                running.zero_()
                last_eval = step
                eval_seconds += time.perf_counter() - eval_started

    train_seconds = time.perf_counter() - prepared - eval_seconds
    model.eval()
    return {
        "params": count_parameters(model),
        "steps": steps,
        "epochs": steps * cfg.batch_tokens / len(train_stream),
        "train_tokens": len(train_stream),
        "val_tokens_scored": min(cfg.eval_tokens, len(val_stream) - 1) // cfg.seq_len * cfg.seq_len,
        "train_loss": history[-1]["train_loss"],
        "val_loss": history[-1]["val_loss"],
        "val_perplexity": math.exp(history[-1]["val_loss"]),
        "tokens_per_second": steps * cfg.batch_tokens / train_seconds,
        "train_seconds": train_seconds,
        "prepare_seconds": prepared - started,  # tokenizing and packing the corpus, the model to the device
        "first_step_seconds": first_step_seconds,  # in train_seconds: compilation, if any, happens here
        "eval_seconds": eval_seconds,
        "total_seconds": time.perf_counter() - started,
        "history": history,
    }


@torch.no_grad()
def sample_texts(model, tokenizer, prompts: list[str], max_new_tokens: int, device: str, seed: int) -> list[str]:
    """One sampled continuation per prompt (pure sampling: top_k 0, top_p 1, as the paper's rollouts)."""
    was_training = model.training
    model.to(device).eval()
    torch.manual_seed(seed)
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left").to(device)  # (B, T)
    output = model.generate(
        **batch,
        do_sample=True,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
    )  # (B, T + new)
    model.train(was_training)
    return tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
