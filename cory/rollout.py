"""Rollouts: batched generation from left-padded prompts, response masks, and the one forward pass per model.

Layout of a rollout (what HF `generate` returns for left-padded prompts):

    input_ids = [ pad pad q q q | r r r EOS pad ]        prompt block (B, P) | response block (B, T)

All responses start at column P, so per-token quantities live in (B, T) tensors aligned with the response block.
`response_mask` is 1 on response tokens up to and including the first EOS (TRL cuts everything after it and keeps
the EOS). Position ids are counted from each row's first real token, so padding never shifts a sequence.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

import torch

from cory.config import GenerationConfig


@dataclass
class Rollout:
    """Prompts and sampled responses of one role for one iteration."""

    prompt_ids: torch.Tensor  # (B, P) left-padded
    prompt_mask: torch.Tensor  # (B, P) 1 on real prompt tokens
    response_ids: torch.Tensor  # (B, T) right-padded
    response_mask: torch.Tensor  # (B, T) 1 up to and including the first EOS
    prompts: list[str]
    responses: list[str]  # decoded, EOS and padding removed

    @property
    def input_ids(self) -> torch.Tensor:  # (B, P + T)
        return torch.cat([self.prompt_ids, self.response_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:  # (B, P + T)
        return torch.cat([self.prompt_mask, self.response_mask], dim=1)

    @property
    def response_lengths(self) -> torch.Tensor:  # (B,)
        return self.response_mask.sum(1)

    def select(self, index: torch.Tensor, on_device: torch.Tensor | None = None) -> "Rollout":
        """The sub-batch at `index` (a 1-D tensor of row indices). An index on the host picks the texts without
        reading anything back from the device (a host sync), and goes to the device without waiting for it (a
        non-blocking copy from pageable memory returns once CUDA has staged it). `on_device`: that copy, where the
        caller has made it already (it indexes other tensors by the same rows)."""
        rows = index.tolist()
        index = index.to(self.response_ids.device, non_blocking=True) if on_device is None else on_device
        return Rollout(
            self.prompt_ids[index],
            self.prompt_mask[index],
            self.response_ids[index],
            self.response_mask[index],
            [self.prompts[i] for i in rows],
            [self.responses[i] for i in rows],
        )


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted from each row's first real token: (B, L) -> (B, L)."""
    return (attention_mask.long().cumsum(1) - 1).clamp(min=0)


def mask_after_eos(response_ids: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    """1 on tokens up to and including the first EOS, 0 after it: (B, T) -> (B, T) long."""
    if eos_token_id is None:
        return torch.ones_like(response_ids)
    is_eos = (response_ids == eos_token_id).long()
    seen_before = is_eos.cumsum(1) - is_eos  # EOS tokens strictly before each position
    return (seen_before == 0).long()


def autocast(device: torch.device | str, enabled: bool = True):
    """bf16 autocast where a GPU is present (unless disabled: ppo.mixed_precision); a no-op context on CPU."""
    device = torch.device(device)
    if device.type == "cuda" and enabled:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def configure_gpu_for_rl(device: torch.device | str) -> None:
    """GPU settings of an RL process: TF32 for fp32 matmuls (ppo.mixed_precision: false) and no cuDNN attention.

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
        return torch.nn.functional.linear(hidden, weight, bias)[..., : self.out_features]


def align_lm_head(lm) -> bool:
    """Make `lm`'s output layer an AlignedLMHead where it is a plain nn.Linear with a row count that is not a multiple
    of 64 (ppo.align_head); in place, weights and tying untouched. Returns whether it changed anything."""
    head = lm.get_output_embeddings()
    if type(head) is not torch.nn.Linear or head.out_features % AlignedLMHead.multiple == 0:
        return False
    head.__class__ = AlignedLMHead
    return True


def fuse_gelu(lm) -> int:
    """Replace each transformers NewGELUActivation ("gelu_new", GPT-2's tanh GELU written out in ~8 elementwise
    operations) in `lm` by the fused kernel of the same function ("gelu_pytorch_tanh"; ppo.fused_gelu), in place;
    the config is left as it is, so a saved model loads as before. Returns how many it replaced."""
    from transformers.activations import ACT2FN, NewGELUActivation

    replaced = 0
    for module in list(lm.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, NewGELUActivation):
                setattr(module, name, ACT2FN["gelu_pytorch_tanh"])
                replaced += 1
    return replaced


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def decode_responses(tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Decode each response without its EOS or padding (so no '<|endoftext|>' reaches a reward: CORY.md B8)."""
    eos = tokenizer.eos_token_id
    lengths = response_mask.sum(1).tolist()
    rows = []
    for ids, n in zip(response_ids.tolist(), lengths):
        ids = ids[:n]
        if ids and ids[-1] == eos:
            ids = ids[:-1]
        rows.append(ids)
    return tokenizer.batch_decode(rows, skip_special_tokens=False)


@torch.no_grad()
class NaNLogitsGuard:
    """A logits processor for `model.generate`: NaN scores are recorded on the device and replaced by 0, so that the
    sampler's multinomial never meets NaN probabilities (a device-side assert that poisons the process's CUDA
    context); `check` then raises NonFiniteError once the call has ended."""

    def __init__(self):
        self.seen = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        nan = torch.isnan(scores)
        found = nan.any()
        self.seen = found if self.seen is None else self.seen | found
        return scores.masked_fill(nan, 0.0)

    def check(self) -> None:
        if self.seen is not None and bool(self.seen):
            from cory.decoding import raise_nonfinite_logits

            raise_nonfinite_logits()


def generate(
    model, tokenizer, prompts: list[str], gen: GenerationConfig, max_new_tokens: int, batch_size: int | None = None,
    mixed_precision: bool = True, dropout: bool = False,
) -> Rollout:
    """Sample one response per prompt with the paper's settings (whole batch at once unless `batch_size`; bf16
    autocast on a GPU unless `mixed_precision` is false).

    With a cache kept per shape (`gen.cache` static or graph: a compiled decoding step per batch size and cache
    length), `batch_size` is also the one batch size every chunk is sampled at: a shorter chunk is padded with copies
    of its last prompt, whose responses are dropped, so that a run's small calls (its logged samples, its probe)
    reuse the decoder its training batches compiled instead of compiling their own (8-11 s each for a math run on an
    H100, against 0.05-0.09 s per call once compiled).

    `model` is a transformers causal LM. It samples in eval mode (no dropout), or in train mode with `dropout` (as
    trl's policy does once updated: ppo.dropout "trl"), and gets its own mode back afterwards.
    """
    device = model_device(model)
    was_training = model.training
    model.train(dropout)
    chunks = []
    step = batch_size or len(prompts)
    limit = model_positions(model)
    room = None if limit is None else limit - max_new_tokens  # prompt tokens that leave the response its positions
    if room is not None and room < 1:
        raise ValueError(f"generate: {max_new_tokens} new tokens do not fit the model's {limit} positions")
    for start in range(0, len(prompts), step):
        enc = tokenizer(prompts[start : start + step], return_tensors="pt", padding=True).to(device)
        input_ids, attention_mask = enc.input_ids, enc.attention_mask
        rows = input_ids.shape[0]
        if batch_size and gen.cache in ("static", "graph") and rows < batch_size:  # the shape the decoder has
            extra = batch_size - rows
            input_ids = torch.cat([input_ids, input_ids[-1:].expand(extra, -1)])
            attention_mask = torch.cat([attention_mask, attention_mask[-1:].expand(extra, -1)])
        if room is not None and input_ids.shape[1] > room:
            # Past the model's positions its position embedding has no row (a device-side assert on a GPU): keep the
            # last `room` tokens of each prompt (left-padded), where a template puts its cue ("Answer:").
            warnings.warn(f"cory.rollout.generate: a prompt left its response too few of the model's {limit} positions;"
                          " prompts are cut to their last tokens", RuntimeWarning, stacklevel=2)
            input_ids, attention_mask = input_ids[:, -room:], attention_mask[:, -room:]
        if gen.cache == "graph":
            from cory.decoding import decoder_for

            length = cache_length(model, input_ids.shape[1], max_new_tokens, least=gen.cache_length)
            decoder = decoder_for(model, input_ids.shape[0], length, gen, tokenizer.pad_token_id,
                                  tokenizer.eos_token_id if gen.stop_at_eos else None,
                                  compile_step=device.type == "cuda")
            with autocast(device, mixed_precision):
                response = decoder.sample(input_ids, attention_mask, max_new_tokens,
                                          max_new_tokens if gen.suppress_eos else 0,
                                          check_every=8 if device.type == "cuda" else 1)
            chunks.append((input_ids[:rows], attention_mask[:rows], response[:rows]))
            continue
        cache = {}
        if gen.cache == "static":
            cache = static_cache(model, input_ids.shape, max_new_tokens, least=gen.cache_length)
        guard = NaNLogitsGuard()
        with autocast(device, mixed_precision):
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                **cache,
                do_sample=True,
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens if gen.suppress_eos else None,
                top_k=gen.top_k,
                top_p=gen.top_p,
                temperature=gen.temperature,
                repetition_penalty=gen.repetition_penalty,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id if gen.stop_at_eos else None,
                logits_processor=[guard],
            )
        guard.check()
        chunks.append((input_ids[:rows], attention_mask[:rows], out[:rows, input_ids.shape[1] :]))
    model.train(was_training)
    prompt_ids = _pad_cat([c[0] for c in chunks], tokenizer.pad_token_id, left=True)
    prompt_mask = _pad_cat([c[1] for c in chunks], 0, left=True)
    response_ids = _pad_cat([c[2] for c in chunks], tokenizer.pad_token_id, left=False)
    response_mask = mask_after_eos(response_ids, tokenizer.eos_token_id if gen.stop_at_eos else None)
    response_mask = response_mask * _pad_cat([torch.ones_like(c[2]) for c in chunks], 0, left=False)
    responses = decode_responses(tokenizer, response_ids, response_mask)
    return Rollout(prompt_ids, prompt_mask, response_ids, response_mask, list(prompts), responses)


def model_positions(model) -> int | None:
    """How many positions the model has (n_positions / max_position_embeddings), or None if its config has neither."""
    config = model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


STATIC_CACHES = "_cory_static_caches"
"""The model attribute that keeps `generate`'s static caches, one per (batch size, length)."""


def static_cache(model, prompt_shape: tuple[int, int], max_new_tokens: int, multiple: int = 64,
                 least: int = 0) -> dict:
    """`past_key_values` for `generate`: a transformers StaticCache for this batch size and a length of prompt +
    response rounded up to `multiple`, at least `least` (capped at the model's positions), kept on the model and reset
    between calls, so that its tensors keep their addresses and a compiled decoding step (CUDA graphs) is replayed,
    not re-recorded."""
    from transformers import StaticCache

    length = cache_length(model, prompt_shape[1], max_new_tokens, multiple, least)
    cache = keep_on_model(model, STATIC_CACHES, (prompt_shape[0], length),
                          lambda: StaticCache(config=model.config, max_cache_len=length))
    cache.reset()  # a no-op on a new one
    return {"past_key_values": cache}


def keep_on_model(model, attribute: str, key, make):
    """The object kept under `key` in the model's plain attribute `attribute` (a dict; not a submodule, so no
    state-dict entries), made by `make()` on first use: per-shape caches and decoders that must keep their tensors'
    addresses between calls."""
    kept = model.__dict__.setdefault(attribute, {})
    if key not in kept:
        kept[key] = make()
    return kept[key]


def cache_length(model, prompt_tokens: int, max_new_tokens: int, multiple: int = 64, least: int = 0) -> int:
    """A static cache's length: prompt + response rounded up to `multiple` (so that a few shapes recur), at least
    `least` (generation.cache_length), at most the model's positions."""
    limit = model_positions(model)
    length = max(-(-(prompt_tokens + max_new_tokens) // multiple) * multiple, least)
    return min(length, limit) if limit else length


def _pad_cat(tensors: list[torch.Tensor], value: int, left: bool) -> torch.Tensor:
    """Concatenate (b_i, L_i) tensors along the batch, padding to the longest L on the left or right."""
    width = max(t.shape[1] for t in tensors)
    padded = []
    for t in tensors:
        pad = (width - t.shape[1], 0) if left else (0, width - t.shape[1])
        padded.append(torch.nn.functional.pad(t, pad, value=value))
    return torch.cat(padded, dim=0)


def forward_response(lm, rollout: Rollout, value_head=None):
    """One forward pass over prompt + response; per-token outputs for the response block only.

    Returns logits (B, T, V) predicting each response token, and values (B, T) from `value_head` on the last hidden
    state at the same positions (the state before each response token, as TRL), or None without a value head.
    """
    T = rollout.response_ids.shape[1]
    attention_mask = rollout.attention_mask
    L = attention_mask.shape[1]
    # position P-1+t predicts response token t: the output layer runs on those T positions only (not the last one,
    # sliced off afterwards: that slice's backward wrote a zero-filled copy of the (B, T+1, V) logits every update)
    predicting = torch.arange(L - T - 1, L - 1, device=attention_mask.device)
    out = lm(
        input_ids=rollout.input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids(attention_mask),
        output_hidden_states=value_head is not None,
        logits_to_keep=predicting,
        use_cache=False,
    )
    logits = out.logits  # (B, T, V)
    values = None
    if value_head is not None:
        hidden = out.hidden_states[-1][:, -(T + 1) : -1]
        values = value_head(hidden).squeeze(-1)
    return logits, values
