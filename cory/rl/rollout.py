"""Rollouts: batched generation from left-padded prompts, response masks, and the one forward pass per model.

Layout of a rollout (what HF `generate` returns for left-padded prompts):

    input_ids = [ pad pad q q q | r r r EOS pad ]        prompt block (B, P) | response block (B, T)

All responses start at column P, so per-token quantities live in (B, T) tensors aligned with the response block.
`response_mask` is 1 on response tokens up to and including the first EOS (TRL cuts everything after it and keeps
the EOS). Position ids are counted from each row's first real token, so padding never shifts a sequence.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from cory.rl.config import GenerationConfig
from cory.rl.decoding import (cache_length, decoder_for, model_positions, position_ids, raise_nonfinite_logits,
                              static_cache)
from cory.rl.kernels import BodyAndHead, autocast, autocast_dtype


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

    def to(self, device: torch.device) -> "Rollout":
        """The same rollout with its tensors on `device` (itself where they are there already)."""
        if self.response_ids.device == device:
            return self
        return Rollout(self.prompt_ids.to(device), self.prompt_mask.to(device), self.response_ids.to(device),
                       self.response_mask.to(device), self.prompts, self.responses)


def mask_after_eos(response_ids: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    """1 on tokens up to and including the first EOS, 0 after it: (B, T) -> (B, T) long."""
    if eos_token_id is None:
        return torch.ones_like(response_ids)
    is_eos = (response_ids == eos_token_id).long()
    seen_before = is_eos.cumsum(1) - is_eos  # EOS tokens strictly before each position
    return (seen_before == 0).long()


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def decode_responses(tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Decode each response without its EOS or padding (so no '<|endoftext|>' reaches a reward: docs/algorithm.md)."""
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
        input_ids, attention_mask, rows = _encode_chunk(tokenizer, prompts[start : start + step], device, gen,
                                                        batch_size, room, limit)
        sample = _sample_graph if gen.cache == "graph" else _sample_hf
        response = sample(model, tokenizer, input_ids, attention_mask, gen, max_new_tokens, mixed_precision)
        chunks.append((input_ids[:rows], attention_mask[:rows], response[:rows]))
    model.train(was_training)
    return _rollout(tokenizer, chunks, prompts, gen)


def _encode_chunk(tokenizer, prompts: list[str], device: torch.device, gen: GenerationConfig, batch_size: int | None,
                  room: int | None, limit: int | None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(input ids, attention mask, rows) of one chunk of prompts, left-padded: at the decoder's batch size where
    decoders are kept per shape (padded with copies of the last prompt, `rows` the real ones), and cut to the last
    `room` tokens where a prompt leaves its response too few of the model's positions."""
    # left padding whatever the tokenizer's padding_side (GPT-2's is right): every response then starts at column P
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left").to(device)
    input_ids, attention_mask = enc.input_ids, enc.attention_mask
    rows = input_ids.shape[0]
    if batch_size and gen.cache in ("static", "graph") and rows < batch_size:  # the shape the decoder has
        extra = batch_size - rows
        input_ids = torch.cat([input_ids, input_ids[-1:].expand(extra, -1)])
        attention_mask = torch.cat([attention_mask, attention_mask[-1:].expand(extra, -1)])
    if room is not None and input_ids.shape[1] > room:
        # Past the model's positions its position embedding has no row (a device-side assert on a GPU): keep the
        # last `room` tokens of each prompt (left-padded), where a template puts its cue ("Answer:").
        warnings.warn(f"cory.rl.rollout.generate: a prompt left its response too few of the model's {limit} "
                      "positions; prompts are cut to their last tokens", RuntimeWarning, stacklevel=3)
        input_ids, attention_mask = input_ids[:, -room:], attention_mask[:, -room:]
    return input_ids, attention_mask, rows


def _sample_graph(model, tokenizer, input_ids: torch.Tensor, attention_mask: torch.Tensor, gen: GenerationConfig,
                  max_new_tokens: int, mixed_precision: bool) -> torch.Tensor:
    """`gen.cache` graph: the responses (B, T) of the model's kept GraphDecoder (cory.rl.decoding)."""
    device = input_ids.device
    length = cache_length(model, input_ids.shape[1], max_new_tokens, least=gen.cache_length)
    decoder = decoder_for(model, input_ids.shape[0], length, gen, tokenizer.pad_token_id,
                          tokenizer.eos_token_id if gen.stop_at_eos else None, compile_step=device.type == "cuda",
                          cache_dtype=autocast_dtype(device, mixed_precision))
    with autocast(device, mixed_precision):
        return decoder.sample(input_ids, attention_mask, max_new_tokens, max_new_tokens if gen.suppress_eos else 0,
                              check_every=8 if device.type == "cuda" else 1)


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
            raise_nonfinite_logits()


def _sample_hf(model, tokenizer, input_ids: torch.Tensor, attention_mask: torch.Tensor, gen: GenerationConfig,
               max_new_tokens: int, mixed_precision: bool) -> torch.Tensor:
    """`gen.cache` dynamic or static: the responses (B, T) of transformers' `generate` (with a static cache kept on
    the model for "static")."""
    cache = {}
    if gen.cache == "static":
        cache = static_cache(model, input_ids.shape, max_new_tokens, least=gen.cache_length,
                             dtype=autocast_dtype(input_ids.device, mixed_precision))
    guard = NaNLogitsGuard()
    with autocast(input_ids.device, mixed_precision):
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
    return out[:, input_ids.shape[1] :]


def _rollout(tokenizer, chunks: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], prompts: list[str],
             gen: GenerationConfig) -> Rollout:
    """The chunks' (prompt ids, prompt mask, response ids) as one Rollout: padded alike, the response mask cut after
    each first EOS, the responses decoded."""
    prompt_ids = _pad_cat([c[0] for c in chunks], tokenizer.pad_token_id, left=True)
    prompt_mask = _pad_cat([c[1] for c in chunks], 0, left=True)
    response_ids = _pad_cat([c[2] for c in chunks], tokenizer.pad_token_id, left=False)
    response_mask = mask_after_eos(response_ids, tokenizer.eos_token_id if gen.stop_at_eos else None)
    response_mask = response_mask * _pad_cat([torch.ones_like(c[2]) for c in chunks], 0, left=False)
    responses = decode_responses(tokenizer, response_ids, response_mask)
    return Rollout(prompt_ids, prompt_mask, response_ids, response_mask, list(prompts), responses)


def _pad_cat(tensors: list[torch.Tensor], value: int, left: bool) -> torch.Tensor:
    """Concatenate (b_i, L_i) tensors along the batch, padding to the longest L on the left or right."""
    width = max(t.shape[1] for t in tensors)
    padded = []
    for t in tensors:
        pad = (width - t.shape[1], 0) if left else (0, width - t.shape[1])
        padded.append(torch.nn.functional.pad(t, pad, value=value))
    return torch.cat(padded, dim=0)


def pad_blocks(rollout: Rollout, multiple: int) -> Rollout:
    """The rollout with its prompt block padded on the left and its response block on the right to multiples of
    `multiple` tokens (ppo.speed.pad_shapes), masked: (B, P) -> (B, P'), (B, T) -> (B, T'). The passes over it give
    every real position what they give on the rollout itself, up to float rounding (the extra keys are masked out, and
    positions count from each row's first real token); per-token tensors of width T' are 0 wherever the mask is."""
    P, T = rollout.prompt_ids.shape[1], rollout.response_ids.shape[1]
    left, right = -P % multiple, -T % multiple
    if not left and not right:
        return rollout
    pad = torch.nn.functional.pad  # token 0 where padded: any id is as good under a zero mask
    return Rollout(pad(rollout.prompt_ids, (left, 0)), pad(rollout.prompt_mask, (left, 0)),
                   pad(rollout.response_ids, (0, right)), pad(rollout.response_mask, (0, right)), rollout.prompts,
                   rollout.responses)


def forward_response(lm, rollout: Rollout, value_head=None):
    """One forward pass over prompt + response; per-token outputs for the response block only.

    Returns logits (B, T, V) predicting each response token, and values (B, T) from `value_head` on the last hidden
    state at the same positions (the state before each response token, as TRL), or None without a value head.
    `lm`: a transformers causal LM (or a compiled callable of one), or its body and output layer apart
    (cory.rl.kernels.BodyAndHead: ppo.speed.last_hidden), which gives the same numbers without transformers' hidden
    states of every layer.
    """
    T = rollout.response_ids.shape[1]
    attention_mask = rollout.attention_mask
    L = attention_mask.shape[1]
    # position P-1+t predicts response token t: the output layer runs on those T positions only (not the last one,
    # sliced off afterwards: that slice's backward wrote a zero-filled copy of the (B, T+1, V) logits every update)
    predicting = torch.arange(L - T - 1, L - 1, device=attention_mask.device)
    inputs = dict(input_ids=rollout.input_ids, attention_mask=attention_mask,
                  position_ids=position_ids(attention_mask), use_cache=False)
    if isinstance(lm, BodyAndHead):
        # what the LM's own forward does with logits_to_keep (transformers' slice_logits_to_keep), on the body's output
        hidden = lm.body(**inputs).last_hidden_state
        logits = lm.head(hidden[:, predicting, :])
    else:
        out = lm(**inputs, output_hidden_states=value_head is not None, logits_to_keep=predicting)
        logits, hidden = out.logits, out.hidden_states[-1] if value_head is not None else None  # (B, T, V), (B, L, H)
    values = None
    if value_head is not None:
        values = value_head(hidden[:, -(T + 1) : -1]).squeeze(-1)
    return logits, values
