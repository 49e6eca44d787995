"""Tiny word-level tokenizer and GPT-2 built from configs (no download), shared by the trainer tests."""

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = ["<eos>", "<unk>", "good", "bad", "the", "movie", "was", "a", "film", "is", "very", "not", "and", "plot"]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<eos>", pad_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def tiny_lm(seed: int = 0, n_layer: int = 2, n_embd: int = 32, dropout: float = 0.0, n_positions: int = 64
            ) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=n_layer, n_embd=n_embd, n_head=2, n_positions=n_positions, vocab_size=len(WORDS), bos_token_id=0,
        eos_token_id=0, pad_token_id=0, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
    )
    return GPT2LMHeadModel(config).eval()


def tiny_llama(seed: int = 0, **config) -> LlamaForCausalLM:
    """A tiny Llama (rotary positions, RMS norms, grouped attention: the paper's 7B architecture) on the tiny
    vocabulary, EOS and padding id 0 as `tiny_lm`; `config` overrides its LlamaConfig."""
    torch.manual_seed(seed)
    sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=64)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(WORDS), bos_token_id=0, eos_token_id=0, pad_token_id=0,
                                        **{**sizes, **config})).eval()


def good_word_reward(queries, responses, answers=None) -> torch.Tensor:
    """Fraction of response words that are 'good' (a dense toy task reward)."""
    return torch.tensor([r.split().count("good") / max(len(r.split()), 1) for r in responses])
