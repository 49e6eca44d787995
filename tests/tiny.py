"""Tiny word-level tokenizer and GPT-2 built from configs (no download), and the toy task the trainer tests train on
(its queries, a dense reward, a small train config, a rollout without sampling), shared by the trainer tests."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from cory.rl.config import IMDB_OBSERVER_TEMPLATE, CORYConfig, GenerationConfig, PPOConfig, TrainConfig

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


QUERIES = ["the movie", "the film was", "a plot", "not very"] * 4


def config(n_agents=2, iterations=30, dropout="update", **cory):
    # "update" (the value head's dropout 0.1 acts in the PPO update) and the exact KL are what test_golden's
    # trajectory was recorded with
    ppo = PPOConfig(learning_rate=3e-3, batch_size=16, mini_batch_size=8, init_kl_coef=0.01, dropout=dropout,
                    kl_penalty="full", generation=GenerationConfig(response_length=(4, 6), repetition_penalty=1.0))
    cory = {"observer_template": IMDB_OBSERVER_TEMPLATE, **cory}
    return TrainConfig(iterations=iterations, seed=0, ppo=ppo, cory=CORYConfig(n_agents=n_agents, **cory))


def fixed_rollout(batch=4, seed=0):
    """A rollout of random tokens (3 prompt, 3 response tokens a row) without sampling."""
    from cory.rl.rollout import Rollout

    ids = torch.randint(2, 10, (batch, 6), generator=torch.Generator().manual_seed(seed))
    ones = torch.ones(batch, 3, dtype=torch.long)
    return Rollout(ids[:, :3], ones, ids[:, 3:], ones.clone(), ["q"] * batch, ["r"] * batch)


def nan_for_the_second_query(queries, responses, answers=None):
    scores = good_word_reward(queries, responses)
    return torch.where(torch.tensor([q == QUERIES[1] for q in queries]), float("nan"), scores)


@pytest.fixture
def tok():
    return tiny_tokenizer()


def toy_sentiment(n: int) -> tuple[list[str], list[int]]:
    texts = [("the movie was very good" if i % 2 else "the film was very bad") + " and the plot" * (i % 3) for i in range(n)]
    return texts, [i % 2 for i in range(n)]


def padded_rollout(batch=8, seed=0):
    """A Rollout: left-padded prompts of 2-4 tokens and responses that end at different lengths (some after 1 token)."""
    from cory.rl.rollout import Rollout

    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(2, len(WORDS), (batch, 4), generator=g)
    prompt_mask = torch.ones(batch, 4, dtype=torch.long)
    prompt_mask[::2, :2] = 0
    prompt_mask[1::4, :1] = 0
    prompt_ids = prompt_ids * prompt_mask
    response_ids = torch.randint(2, len(WORDS), (batch, 5), generator=g)
    response_mask = torch.ones(batch, 5, dtype=torch.long)
    response_mask[::3, 3:] = 0
    response_mask[1::4, 1:] = 0
    return Rollout(prompt_ids, prompt_mask, response_ids * response_mask, response_mask, ["q"] * batch, ["r"] * batch)
