"""The sentiment reward classifier, trained from scratch offline (the stand-in for `lvwerra/distilbert-imdb`).

A GPT-2 sequence classifier, optionally started from the IMDB LM's body, trained on full reviews mixed with short
prefix crops (the RL reward scores ~20-token query + response texts), and measured on both. It shares the model
shapes and the optimisation pieces of `cory.tasks.pretrain` and `cory.tasks.training`.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2ForSequenceClassification

from cory.hf import NO_ATTENTION_MASK, count_parameters, expected_warnings, fresh_head_report, load_pretrained
from cory.schema import ConfigError
from cory.tasks.config import ClassifierConfig
from cory.tasks.pretrain import ID2LABEL, gpt2_config
from cory.tasks.tokenizer import encode
from cory.tasks.training import adamw, is_cuda, optimizer_step, setup, sync, warmup_cosine


def _encode_reviews(
    tokenizer, texts: list[str], max_length: int, tail: bool = False
) -> tuple[torch.Tensor, np.ndarray]:
    """Right-padded first (or, with tail, last) `max_length` tokens of each text: ids (N, max_length) int64 and
    lengths (N,) on the host. The texts are tokenized once per process (`cory.tasks.tokenizer.encode`): head and tail crops,
    and the pretraining of the LM the classifier starts from, share one tokenization."""
    ids, offsets = encode(tokenizer, texts)
    lengths = np.minimum(np.diff(offsets), max_length)
    if (lengths == 0).any():
        raise ValueError(f"text {int(np.argmin(lengths))} is empty: a classifier needs at least one token")
    starts = offsets[1:] - lengths if tail else offsets[:-1]  # (N,)
    columns = np.arange(max_length)
    real = columns < lengths[:, None]  # (N, max_length)
    tokens = np.where(real, ids[np.where(real, starts[:, None] + columns, 0)], tokenizer.pad_token_id)
    return torch.from_numpy(tokens.astype(np.int64)), lengths


def _crop(tokens: torch.Tensor, index: torch.Tensor, kept: np.ndarray, pad_id: int) -> torch.Tensor:
    """Rows `index` (on the device) of `tokens` cut to their first `kept` tokens, re-padded, as narrow as the longest:
    (b, width).

    The widths come from the host, and the one per-step copy to the device does not wait for it (non_blocking: a
    blocking copy to a GPU first waits for every kernel queued before it; from pageable memory CUDA copies the array
    to a staging buffer before it returns), so batching never waits for the device.
    """
    width = int(kept.max())
    batch = tokens[index, :width]  # (b, width)
    kept_on_device = torch.from_numpy(kept).to(tokens.device, non_blocking=True)  # (b,)
    cut = torch.arange(width, device=tokens.device) >= kept_on_device[:, None]
    return batch.masked_fill(cut, pad_id)


@torch.no_grad()
def classifier_accuracy(
    model, tokenizer, texts: list[str], labels: list[int], max_length: int, device: str, batch_size: int = 256,
    truncation: str = "head",
) -> float:
    """Accuracy (label 1 = POSITIVE) on the first (truncation head) or last (tail) `max_length` tokens of each text,
    scored as the RL reward scores: the tokenizer's own call with right padding and an attention mask, so any hub
    classifier is scored right too."""
    texts, labels = list(texts), list(labels)
    was_training = model.training
    model.to(device).eval()
    side, tokenizer.truncation_side = tokenizer.truncation_side, "left" if truncation == "tail" else "right"
    try:
        return _accuracy(model, tokenizer, texts, labels, max_length, device, batch_size)
    finally:
        tokenizer.truncation_side = side
        model.train(was_training)


def _accuracy(model, tokenizer, texts: list[str], labels: list[int], max_length: int, device: str, batch_size: int):
    correct = 0
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(
            texts[start : start + batch_size],
            truncation=True,
            max_length=max_length,
            padding=True,
            padding_side="right",
            return_tensors="pt",
        ).to(device)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=is_cuda(device)):
            logits = model(**batch).logits  # (b, num_labels)
        correct += (logits.argmax(-1).cpu() == torch.tensor(labels[start : start + batch_size])).sum().item()
    return correct / len(texts)


def build_classifier(tokenizer, cfg: ClassifierConfig, init_from: str | Path | None = None):
    """A 2-label GPT-2 sequence classifier: the body of the causal LM in `init_from`, or random with shape `cfg.lm`."""
    labels = {"num_labels": 2, "id2label": ID2LABEL, "label2id": {v: k for k, v in ID2LABEL.items()}}
    if init_from is None:
        return GPT2ForSequenceClassification(gpt2_config(cfg.lm, len(tokenizer), tokenizer.eos_token_id, **labels))
    from transformers import AutoModelForSequenceClassification

    # The LM's body is loaded; its LM head is dropped and the 2-way score head starts random (transformers' load
    # report of its missing weights is expected).
    with expected_warnings(fresh_head_report("score")):
        return load_pretrained(
            AutoModelForSequenceClassification.from_pretrained,
            str(init_from),
            "reward_model.init_from",
            pad_token_id=tokenizer.pad_token_id,
            **labels,
        )


def train_reward_classifier(
    texts: list[str],
    labels: list[int],
    val_texts: list[str],
    val_labels: list[int],
    tokenizer,
    cfg: ClassifierConfig,
    device: str,
    init_from: str | Path | None = None,
):
    """Train a sentiment classifier (label 1 = POSITIVE); returns (model, metrics) with held-out accuracies.

    A fraction `short_fraction` of the batches cut every review to a random short prefix, so that the POSITIVE logit
    is meaningful on the short query+response texts the RL reward scores, not only on full reviews.
    """
    started = time.perf_counter()
    bf16 = setup(device)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = build_classifier(tokenizer, cfg, init_from).to(device).train()
    if cfg.max_length > model.config.n_positions:
        raise ConfigError(f"classifier.max_length: {cfg.max_length} exceeds the model's n_positions")
    tokens, lengths, full = _training_reviews(tokenizer, texts, cfg, device)
    y = torch.tensor(labels, device=device)  # (N,)
    pad_id = model.config.pad_token_id

    steps_per_epoch = math.ceil(len(texts) / cfg.batch_size)
    steps = math.ceil(cfg.epochs * steps_per_epoch)
    order = np.concatenate([rng.permutation(len(texts)) for _ in range(math.ceil(cfg.epochs) + 1)])
    order_on_device = torch.from_numpy(order).to(device)  # the steps' rows, sliced on the device: no copy per step
    optimizer = adamw(model, cfg.learning_rate, cfg.weight_decay, (0.9, 0.999), bf16)
    schedule = warmup_cosine(optimizer, cfg.warmup_steps, steps, 0.0)
    lo, hi = cfg.short_tokens
    history, running, eval_seconds = [], torch.zeros((), device=device), 0.0
    sync(device)
    prepared = time.perf_counter()
    for step in range(1, steps + 1):
        batch_rows = slice((step - 1) * cfg.batch_size, step * cfg.batch_size)
        rows, index = order[batch_rows], order_on_device[batch_rows]
        short = rng.random() < cfg.short_fraction
        keep = rng.integers(lo, hi + 1, size=len(rows)) if short else np.full(len(rows), cfg.max_length)
        # Right padding with no attention mask: under causal attention the last real token, which the head reads
        # (found through the pad id), never sees the pads after it, and the unmasked path runs flash attention.
        batch = _crop(tokens if short else full, index, np.minimum(lengths[rows], keep), pad_id)  # (B, width)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16), \
                expected_warnings(NO_ATTENTION_MASK):  # no mask on purpose (above)
            logits = model(input_ids=batch).logits  # (B, 2)
        loss = F.cross_entropy(logits.float(), y[index])
        loss.backward()
        optimizer_step(model, optimizer, schedule, cfg.grad_clip)
        running += loss.detach()

        if step % steps_per_epoch == 0 or step == steps:  # an epoch's end: its loss and the held-out accuracy
            eval_started = time.perf_counter()
            accuracy = classifier_accuracy(model, tokenizer, val_texts, val_labels, cfg.max_length, device,
                                           truncation=cfg.truncation)
            history.append({"step": step, "epoch": step / steps_per_epoch,
                            "train_loss": running.item() / (step - (history[-1]["step"] if history else 0)),
                            "accuracy": accuracy, "seconds": time.perf_counter() - prepared})
            running.zero_()
            eval_seconds += time.perf_counter() - eval_started

    train_seconds = time.perf_counter() - prepared - eval_seconds
    model.eval()
    prefix = cfg.eval_prefix_tokens
    prefix_accuracy = classifier_accuracy(model, tokenizer, val_texts, val_labels, prefix, device)
    return model, {
        "params": count_parameters(model),
        "steps": steps,
        "train_reviews": len(texts),
        "val_reviews": len(val_texts),
        "accuracy": history[-1]["accuracy"],
        f"accuracy_prefix{prefix}": prefix_accuracy,
        "train_loss": history[-1]["train_loss"],
        "reviews_per_second": steps * cfg.batch_size / train_seconds,
        "train_seconds": train_seconds,
        "total_seconds": time.perf_counter() - started,
        "history": history,
    }


def _training_reviews(tokenizer, texts: list[str], cfg: ClassifierConfig, device: str
                      ) -> tuple[torch.Tensor, np.ndarray, torch.Tensor]:
    """(review starts (N, max_length) on the device, which the short-prefix batches are cut from; their lengths (N,);
    the full-length crops the other batches read: the starts again, or the reviews' ends with truncation tail)."""
    tokens, lengths = _encode_reviews(tokenizer, texts, cfg.max_length)
    tokens = tokens.to(device)
    if cfg.truncation == "tail":
        return tokens, lengths, _encode_reviews(tokenizer, texts, cfg.max_length, tail=True)[0].to(device)
    return tokens, lengths, tokens


def reward_model(cfg: ClassifierConfig, source: str | None, tokenizer_name: str, init_from: Path | None,
                 train: list[dict], validation: list[dict], device: str):
    """The sentiment reward model: trained here on the `train` reviews (`source` None: from the body of the LM in
    `init_from`, with its tokenizer, or random with shape `cfg.lm` and the tokenizer `tokenizer_name`), or the model
    `source` (a hub name or folder) loaded and only evaluated. Returns (model, tokenizer, metrics, history): the
    held-out accuracies on the `validation` reviews, and the training history (empty for a loaded model)."""
    from transformers import AutoModelForSequenceClassification

    from cory.tasks.tokenizer import load_tokenizer

    val_texts, val_labels = [row["text"] for row in validation], [row["label"] for row in validation]
    if source is None:
        tokenizer = load_tokenizer(str(init_from) if init_from else tokenizer_name)
        model, metrics = train_reward_classifier([row["text"] for row in train], [row["label"] for row in train],
                                                 val_texts, val_labels, tokenizer, cfg, device, init_from=init_from)
        return model, tokenizer, metrics, metrics.pop("history")
    started = time.perf_counter()
    model = load_pretrained(AutoModelForSequenceClassification.from_pretrained, source, "reward_model.source")
    tokenizer = load_tokenizer(source, "reward_model.source")
    prefix = cfg.eval_prefix_tokens
    metrics = {
        "params": count_parameters(model),
        "val_reviews": len(val_texts),
        "accuracy": classifier_accuracy(model, tokenizer, val_texts, val_labels, cfg.max_length, device,
                                        truncation=cfg.truncation),
        f"accuracy_prefix{prefix}": classifier_accuracy(model, tokenizer, val_texts, val_labels, prefix, device),
        "total_seconds": time.perf_counter() - started,
    }
    return model, tokenizer, metrics, []
