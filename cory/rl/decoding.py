"""Sampling with the whole decoding step as one CUDA graph (`ppo.generation.cache: graph`).

transformers' `generate` with a static cache compiles the model's forward pass of a decoding step, but everything
around it runs eagerly, token by token: its input preparation, the logits processors, the sampling, the stopping
criteria and a host sync per token to ask whether every row has finished. For the small models of the default
profile that is most of an iteration: a math CORY iteration's 158 decoding steps spent 3.2 ms each on an H100, of
which the compiled forward's kernels were 0.47 ms (benchmark/rl.py --profile).

Here one compiled function does a whole step: the logits processors, the draw, the bookkeeping of finished rows and
the forward pass of the drawn token into a static KV cache, all on buffers that keep their addresses between calls,
so that on a GPU it is one CUDA graph replay (torch.compile "reduce-overhead"). The host asks whether every row has
finished only every `check_every` steps.

It samples what `generate` samples: the same processors in the same order (repetition penalty, which leaves the
prompt's left padding out as transformers >= 5.23 does, where older versions penalised the pad token (GPT-2's EOS) in padded rows
only; no EOS before `min_new_tokens`; temperature, top-k, top-p: transformers' own warper classes), the same draw (torch.multinomial's
own algorithm for one sample, argmax(p / q) with q ~ Exp(1), which a graph can hold), finished rows continued with
the pad token, and the output cut where `generate` would have stopped. On the CPU (eager, or compiled with
inductor's `fallback_random`) the tokens are identical (tests/test_decoding.py); on a GPU the compiled forward's float
rounding differs from the eager one's, as with the static cache of `generate`. When every row ends early, the steps
run past that point draw random numbers `generate` would not have drawn, so later draws of the process differ.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from cory.rl.config import GenerationConfig


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted from each row's first real token: (B, L) -> (B, L)."""
    return (attention_mask.long().cumsum(1) - 1).clamp(min=0)


def model_positions(model) -> int | None:
    """How many positions the model has (n_positions / max_position_embeddings), or None if its config has neither."""
    config = model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


STATIC_CACHES = "_cory_static_caches"
"""The model attribute that keeps `generate`'s static caches, one per (batch size, length)."""


def static_cache(model, prompt_shape: tuple[int, int], max_new_tokens: int, multiple: int = 64,
                 least: int = 0, dtype: torch.dtype | None = None) -> dict:
    """`past_key_values` for `generate`: a StaticCache (`kv_cache`, keys and values held in `dtype`) for this batch
    size and a length of prompt + response rounded up to `multiple`, at least `least` (capped at the model's
    positions), kept on the model and reset between calls, so that its tensors keep their addresses and a compiled
    decoding step (CUDA graphs) is replayed, not re-recorded."""
    length = cache_length(model, prompt_shape[1], max_new_tokens, multiple, least)
    cache = keep_on_model(model, STATIC_CACHES, (prompt_shape[0], length, dtype),
                          lambda: kv_cache(model, length, dtype))
    cache.reset()  # a no-op on a new one
    return {"past_key_values": cache}


def kv_cache(model, length: int, dtype: torch.dtype | None):
    """transformers' StaticCache of `length` tokens for `model`, its keys and values held in `dtype` (None: in the
    dtype the layers compute them in).

    Under bf16 autocast the attention reads them in bf16 (autocast casts its inputs), but a layer may compute them in
    fp32: Llama's rotary embedding multiplies the keys by cos/sin in the residual stream's dtype, fp32 where the norms
    are (a 4-bit base prepared for training keeps them in fp32), and a 4-bit layer returns its input's dtype. Such a
    cache holds fp32 keys and values, twice the memory, and every decoding step casts all of it to bf16 again, layer
    by layer: at the 7B PPO run's shape (batch 32, 1024 tokens) about 50 GB of memory traffic per step, over half of
    a step's GPU time on an H100 (docs/scale.md). Held in `dtype` they are cast once, as they are written, and the
    attention reads the same bf16 numbers."""
    return _dtype_cache_class()(config=model.config, max_cache_len=length, dtype=dtype)


@functools.cache
def _dtype_cache_class():
    from transformers import StaticCache

    class DtypeStaticCache(StaticCache):
        """A StaticCache whose keys and values are cast to `dtype` (None: kept as they come) as they are written."""

        def __init__(self, *args, dtype: torch.dtype | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            self.store_dtype = dtype

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if self.store_dtype is not None:
                key_states, value_states = key_states.to(self.store_dtype), value_states.to(self.store_dtype)
            return super().update(key_states, value_states, *args, **kwargs)

    return DtypeStaticCache


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


class GraphDecoder:
    """The static buffers and the compiled step for one model, batch size and cache length, kept on the model
    between calls (`decoder_for`), so that the addresses a CUDA graph recorded stay valid."""

    def __init__(self, model, batch_size: int, length: int, gen: GenerationConfig, pad_token_id: int,
                 eos_token_id: int | None, compile_step: bool, cache_dtype: torch.dtype | None = None):
        self.model, self.length, self.gen = model, length, gen
        device = next(model.parameters()).device
        self.on_gpu = device.type == "cuda"
        self.cache = kv_cache(model, length, cache_dtype)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft model passes kwargs on
        forward = inspect.signature(base.forward).parameters
        self.cache_kwarg = "cache" if "cache" in forward else "past_key_values"  # newer transformers name it "cache"
        self.pass_cache_position = "cache_position" in forward  # older ones place a token by it
        self.vocab = vocab = model.get_output_embeddings().out_features
        long = dict(dtype=torch.long, device=device)
        self.tokens = torch.zeros(batch_size, length, **long)  # the sequence so far; `vocab` at padding and after
        self.valid = torch.zeros(batch_size, length, dtype=torch.bool, device=device)  # keys a query may attend to
        self.logits = torch.zeros(batch_size, vocab, device=device)  # the last position's logits, fp32
        self.position = torch.zeros(batch_size, 1, **long)  # the next token's position id (per row)
        self.slot = torch.zeros(1, **long)  # the next token's cache slot (the same for every row)
        self.step = torch.zeros((), **long)  # new tokens drawn so far
        self.unfinished = torch.ones(batch_size, dtype=torch.bool, device=device)
        self.steps_alive = torch.zeros((), **long)  # steps that began with a row unfinished: the output's width
        self.nonfinite = torch.zeros((), dtype=torch.bool, device=device)  # a row's probabilities held a NaN
        self.eos = torch.zeros(vocab, dtype=torch.bool, device=device)
        if eos_token_id is not None:
            self.eos[eos_token_id] = True
        self.pad = torch.tensor(pad_token_id, **long)
        self.has_eos = eos_token_id is not None
        self.stop_at_eos = gen.stop_at_eos and self.has_eos
        self.min_new_tokens = torch.zeros((), **long)  # no EOS before this many new tokens (a tensor: set per call)
        self.warpers = self._warpers()
        for buffer in (self.tokens, self.valid, self.logits, self.position, self.slot, self.step, self.unfinished,
                       self.steps_alive, self.min_new_tokens, self.nonfinite):
            torch._dynamo.mark_static_address(buffer)
        self.decode = self._compiled() if compile_step else self._step
        self.attention = decoding_attention if self.on_gpu else contextlib.nullcontext

    def _warpers(self) -> list:
        """transformers' sampling warpers, in `generate`'s order, for the settings that are not the identity."""
        from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                            TopPLogitsWarper)

        gen, warpers = self.gen, []
        if gen.temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(gen.temperature))
        if gen.top_k:
            warpers.append(TopKLogitsWarper(top_k=gen.top_k))
        if gen.top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p=gen.top_p))
        return warpers

    def _compiled(self):
        # Every decoder is a recompilation of the same function (other buffers, other settings): room for many.
        config = torch._dynamo.config
        limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # torch < 2.6
        setattr(config, limit, max(getattr(config, limit), 64))
        options = {"fallback_random": True}  # aten's random ops: the eager draws, and a graph-safe generator
        if self.on_gpu:
            options["triton.cudagraphs"] = True  # torch.compile's "reduce-overhead"
        return torch.compile(self._step, fullgraph=True, dynamic=False, options=options)

    # ---------------------------------------------------------------------------------------------------------------

    def choose(self) -> torch.Tensor:
        """Draw the next token of every row from `self.logits` and write it into the sequence (the first half of a
        step, the whole of the last one). Returns the tokens (B,)."""
        scores = self.logits
        if self.gen.repetition_penalty != 1.0:
            # transformers' RepetitionPenaltyLogitsProcessor on the tokens so far, without the prompt's padding (as
            # `generate` does since transformers 5.23: its padding_lengths): those columns and the ones not yet
            # drawn hold `vocab`, an extra score column that is dropped afterwards
            padded = torch.nn.functional.pad(scores, (0, 1))
            seen = torch.gather(padded, 1, self.tokens)
            seen = torch.where(seen < 0, seen * self.gen.repetition_penalty, seen / self.gen.repetition_penalty)
            scores = padded.scatter(1, self.tokens, seen)[:, : self.vocab]
        if self.has_eos:  # MinNewTokensLengthLogitsProcessor (min_new_tokens 0: no effect)
            scores = torch.where(self.eos & (self.step < self.min_new_tokens), -math.inf, scores)
        for warper in self.warpers:
            scores = warper(self.tokens, scores)
        probs = torch.softmax(scores, dim=-1)
        drawn = (probs / torch.empty_like(probs).exponential_(1)).argmax(-1)  # torch.multinomial(probs, 1)
        # A NaN logit (a diverged policy) makes its row's probabilities NaN: recorded on the device and raised once the
        # sample ends (no host sync per step); the row draws padding meanwhile, a valid token id.
        broken = torch.isnan(probs).any(-1)
        self.nonfinite.logical_or_(broken.any())
        self.steps_alive.add_(self.unfinished.any().long())
        tokens = torch.where(self.unfinished & ~broken, drawn, self.pad)
        if self.stop_at_eos:
            self.unfinished.logical_and_(~self.eos[tokens])
        self.tokens.index_copy_(1, self.slot, tokens[:, None])
        self.valid.index_fill_(1, self.slot, True)
        self.step.add_(1)
        return tokens

    def _cache_kwargs(self, slots: torch.Tensor) -> dict:
        """The model's keyword arguments for writing the keys and values of `slots` into the cache."""
        kwargs = {self.cache_kwarg: self.cache}
        if self.pass_cache_position:
            kwargs["cache_position"] = slots
        return kwargs

    def _step(self) -> None:
        """A whole decoding step: draw the next tokens, then run them through the model into the cache."""
        tokens = self.choose()
        out = self.model(input_ids=tokens[:, None], attention_mask=self.valid[:, None, None, :],
                         position_ids=self.position, use_cache=True, **self._cache_kwargs(self.slot))
        self.logits.copy_(out.logits[:, -1])
        self.position.add_(1)
        self.slot.add_(1)

    # ---------------------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def sample(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
               min_new_tokens: int, check_every: int = 8) -> torch.Tensor:
        """Responses (B, T) for left-padded prompts (B, P), T <= max_new_tokens where every row ended early."""
        B, P = input_ids.shape
        self.cache.reset()
        self.tokens.fill_(self.vocab)
        self.tokens[:, :P] = input_ids.masked_fill(attention_mask == 0, self.vocab)
        self.valid.zero_()
        self.valid[:, :P] = attention_mask.bool()
        self.position.copy_(attention_mask.long().sum(1, keepdim=True))
        self.slot.fill_(P)
        self.step.zero_()
        self.unfinished.fill_(True)
        self.steps_alive.zero_()
        self.nonfinite.zero_()
        self.min_new_tokens.fill_(min_new_tokens)
        # the prompt: one eager forward pass, as `generate`'s prefill
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask),
                         use_cache=True, logits_to_keep=1,
                         **self._cache_kwargs(torch.arange(P, device=input_ids.device)))
        self.logits.copy_(out.logits[:, -1])
        del out
        with self.attention():  # the same attention kernel whenever the step is traced, compiled or replayed
            for t in range(max_new_tokens - 1):
                if t % check_every == check_every - 1 and not self.unfinished.any():
                    break
                if self.on_gpu:
                    torch.compiler.cudagraph_mark_step_begin()
                self.decode()
            else:
                self.choose()  # the last token needs no forward pass
        width = int(self.steps_alive)
        if bool(self.nonfinite):
            raise_nonfinite_logits()
        return self.tokens[:, P : P + width].clone()


def raise_nonfinite_logits() -> None:
    from cory.rl.ppo import NonFiniteError

    raise NonFiniteError("non-finite logits reached the sampler (NaN sampling probabilities): the policy diverged")


def decoding_attention():
    """The attention kernels of a GPU decoding step: cuDNN's first. The RL processes turn cuDNN attention off
    (cory.rl.kernels.configure_gpu_for_rl: its backward returns NaN gradients for some masked shapes), which leaves a
    step's one query token to the memory-efficient kernel, whose 64-query tiles are 63/64 idle (45 us per call on an
    H100 at the math runs' shape, against 22 us for cuDNN's, benchmark/decode.py --kernels). The step computes no
    gradient, and its query always attends to itself (no fully masked row); the prompt's pass is not inside it."""
    backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    if "set_priority" in inspect.signature(sdpa_kernel).parameters:  # torch >= 2.6: this order, cuDNN first
        return sdpa_kernel(backends, set_priority=True)
    return sdpa_kernel(backends)  # older torch: its own order among them


GRAPH_DECODERS = "_cory_graph_decoders"
"""The model attribute that keeps its GraphDecoders, one per (batch size, cache length, settings)."""


def decoder_for(model, batch_size: int, length: int, gen: GenerationConfig, pad_token_id: int,
                eos_token_id: int | None, compile_step: bool, cache_dtype: torch.dtype | None = None) -> GraphDecoder:
    """The model's GraphDecoder for this batch size, a cache of at least `length` tokens (its keys and values held in
    `cache_dtype`: `kv_cache`) and these settings, made on first use and kept in a plain attribute of the model (not a
    submodule: no state-dict entries). A kept decoder with a longer cache is reused (the shortest such): the extra
    positions are masked out, so it samples the same tokens, and another length would be another compilation."""
    settings = (gen.temperature, gen.top_k, gen.top_p, gen.repetition_penalty, gen.stop_at_eos, pad_token_id,
                eos_token_id, compile_step, cache_dtype)
    kept = model.__dict__.get(GRAPH_DECODERS, {})
    longer = [key for key in kept if key[0] == batch_size and key[1] >= length and key[2:] == settings]
    if longer:
        return kept[min(longer, key=lambda key: key[1])]
    return keep_on_model(model, GRAPH_DECODERS, (batch_size, length, *settings), lambda: GraphDecoder(
        model, batch_size, length, gen, pad_token_id, eos_token_id, compile_step, cache_dtype))


def cache_shapes(model) -> list[list[int]]:
    """[batch size, cache length] of every static cache and decoder kept on the model: each one a compilation of the
    decoding step on a GPU (summary.json's decoding_shapes)."""
    shapes = {key[:2] for attribute in (GRAPH_DECODERS, STATIC_CACHES) for key in model.__dict__.get(attribute, {})}
    return [list(shape) for shape in sorted(shapes)]
