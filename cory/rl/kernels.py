"""Speed only: how the RL passes run fast without changing what they compute (beyond float rounding).

bf16 autocast, the process's GPU settings, the output layer on a weight padded to 64 rows, GPT-2's GELU as one fused
kernel, torch.compile of the forward passes (whole or per transformer block), the compiled passes over the
vocabulary, and the bf16 weight copy the passes can run on. `prepare_for_rl` is what the trainer calls on a model
before it duplicates it; the settings are documented in cory.rl.config (see also docs/speed.md).
"""

from __future__ import annotations

import contextlib
import copy
import functools

import torch

from cory.hf import transformer_blocks
from cory.rl.config import SpeedConfig


def prepare_for_rl(lm, cfg: SpeedConfig) -> None:
    """Ready `lm` for the RL passes, in place and before it is duplicated (the agents' copies and the reference inherit
    it): the process's GPU settings, the output layer on a padded weight (ppo.speed.align_head) and GPT-2's GELU as one
    kernel (ppo.speed.fused_gelu). None of them changes what the model computes beyond float rounding."""
    configure_gpu_for_rl(next(lm.parameters()).device)
    if cfg.align_head:
        align_lm_head(lm)
    if cfg.fused_gelu:
        fuse_gelu(lm)


def autocast(device: torch.device | str, enabled: bool = True):
    """bf16 autocast where a GPU is present (unless disabled: ppo.speed.mixed_precision); a no-op context on CPU."""
    dtype = autocast_dtype(device, enabled)
    return contextlib.nullcontext() if dtype is None else torch.autocast("cuda", dtype=dtype)


def autocast_dtype(device: torch.device | str, enabled: bool = True) -> torch.dtype | None:
    """The dtype `autocast(device, enabled)` computes its products and attention in; None where it is a no-op."""
    return torch.bfloat16 if torch.device(device).type == "cuda" and enabled else None


def configure_gpu_for_rl(device: torch.device | str) -> None:
    """GPU settings of an RL process: TF32 for fp32 matmuls (ppo.speed.mixed_precision: false) and no cuDNN attention.

    Why no cuDNN attention: RL forwards pass an explicit padding mask (left-padded prompts, post-EOS pads), and with
    a mask the cuDNN SDPA backward of torch >= 2.11 on H100/H200 returns NaN query gradients whenever
    seq_len % 128 == 64 and a row's logsumexp is very negative (a fully masked pad row is): pytorch/pytorch#196678,
    huggingface/trl#7181. Seen here: CORY runs whose observer sequences reach 64 or 192 tokens got NaN weights after
    a few iterations. The memory-efficient and math backends are clean on the same inputs; pretraining and the
    classifier pass no mask and keep cuDNN.
    """
    if torch.device(device).type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)
        torch.set_float32_matmul_precision("high")  # TF32


class AlignedLMHead(torch.nn.Linear):
    """An output layer whose matmul runs on its weight padded to a multiple of 64 rows, the extra outputs sliced off
    again: the same logits and gradients. On a GPU, cuBLAS falls back to slow kernels for GPT-2's odd 50,257 rows (the
    base-model stage's `lm_loss` pads for the same reason). The weight and its state-dict key stay as they are."""

    multiple = 64

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        pad = -self.out_features % self.multiple
        bias = None if self.bias is None else torch.nn.functional.pad(self.bias, (0, pad))
        weight = torch.nn.functional.pad(self.weight, (0, 0, 0, pad))
        # contiguous: the prompt pass hands over its last position as a strided slice (logits_to_keep=1); on bf16
        # weights (no autocast cast to copy it) a GPT-2 Large sampling call at batch 256 spent 9.3 ms in one cuBLAS
        # kernel there, against 63 us for each step's product (docs/scale.md)
        return torch.nn.functional.linear(hidden.contiguous(), weight, bias)[..., : self.out_features]


def align_lm_head(lm) -> bool:
    """Make `lm`'s output layer an AlignedLMHead where it is a plain nn.Linear with a row count that is not a multiple
    of 64 (ppo.speed.align_head); in place, weights and tying untouched. Returns whether it changed anything."""
    head = lm.get_output_embeddings()
    if type(head) is not torch.nn.Linear or head.out_features % AlignedLMHead.multiple == 0:
        return False
    head.__class__ = AlignedLMHead
    return True


def fuse_gelu(lm) -> int:
    """Replace each transformers NewGELUActivation ("gelu_new", GPT-2's tanh GELU written out in ~8 elementwise
    operations) in `lm` by the fused kernel of the same function ("gelu_pytorch_tanh"; ppo.speed.fused_gelu), in place;
    the config is left as it is, so a saved model loads as before. Returns how many it replaced."""
    from transformers.activations import ACT2FN, NewGELUActivation

    replaced = 0
    for module in list(lm.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, NewGELUActivation):
                setattr(module, name, ACT2FN["gelu_pytorch_tanh"])
                replaced += 1
    return replaced


def compiled(fn, dynamic: bool = True):
    """`fn` (a model, or a function of tensors) under torch.compile, with dynamic shapes (batch and sequence lengths
    change every iteration) or, `dynamic` false, for each shape it meets (ppo.speed.pad_shapes keeps them few); a
    model's compiled callable shares its weights."""
    if not dynamic:  # every padded shape and grad mode of every agent's and the reference's passes: room for them all
        _raise_recompile_limit(64)
    return torch.compile(fn, dynamic=dynamic)


def _raise_recompile_limit(least: int) -> None:
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # torch < 2.6
    setattr(config, limit, max(getattr(config, limit), least))


def compiled_forward(lm, cfg: SpeedConfig):
    """The callable of an LM's experience and update forward passes under `ppo.speed`: the LM itself, or with
    `last_hidden` its body and output layer apart (`BodyAndHead`); under `compile` true that LM (or body) as one graph
    (`compiled`), "regional" with its transformer blocks compiled during the call (`RegionalForward`); compiled for
    dynamic shapes, or for each padded one with `pad_shapes`."""
    model = lm.base_model if cfg.last_hidden else lm
    dynamic = cfg.pad_shapes is None
    if cfg.compile:
        model = compiled(model, dynamic) if cfg.compile is True else RegionalForward(model, dynamic)
    return BodyAndHead(model, lm.get_output_embeddings()) if cfg.last_hidden else model


class BodyAndHead:
    """An LM as its body (the transformer, returning the last hidden state: transformers' `base_model`, or a compiled
    callable of it) and its output layer, called apart (ppo.speed.last_hidden): cory.rl.rollout.forward_response runs
    the output layer and the value head on the body's last hidden state, as the LM's own forward runs the layer."""

    def __init__(self, body, head):
        self.body, self.head = body, head


class RegionalForward:
    """A model's forward pass with each transformer block compiled: one graph that every block reuses (dynamo lifts a
    block's weights to inputs), so a process compiles one block's forward and backward instead of the whole model's,
    and the embedding, final norm and output layer stay eager. The blocks run compiled only inside this call: sampling
    (and the reference's copy, if any) calls the same blocks eagerly or through a compiled decoding step of its own.
    `model`: a causal LM, or its body (transformers' `base_model`)."""

    def __init__(self, model, dynamic: bool = True):
        self.lm, self.blocks = model, transformer_blocks(model, "ppo.speed.compile")
        self.calls = [compiled(block._call_impl, dynamic) for block in self.blocks]

    def __call__(self, *args, **kwargs):
        for block, call in zip(self.blocks, self.calls):
            block._compiled_call_impl = call  # what nn.Module.compile sets; nn.Module.__call__ then runs it
        try:
            return self.lm(*args, **kwargs)
        finally:
            for block in self.blocks:
                block._compiled_call_impl = None


def bf16_copy(lm):
    """A bf16 copy of `lm` (ppo.speed.bf16_weights: the agent's passes run on it), trainable where `lm` is."""
    return copy.deepcopy(lm).to(torch.bfloat16)


def vocabulary_pass(fn, cfg: SpeedConfig, logits: torch.Tensor, eager=None):
    """`fn` (a pure function of (B, T, V) logits), compiled where ppo.speed.fused_vocab asks for it and the logits are
    on a GPU; else `eager` (the same values, written for eager kernels) or `fn` itself."""
    if cfg.fused_vocab and logits.is_cuda:
        return _compiled(fn)
    return eager or fn


_compiled = functools.cache(compiled)  # once per process: shapes vary between calls and runs (dynamic shapes)
