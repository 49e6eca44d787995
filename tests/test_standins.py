"""Stand-ins of the paper's hub models: the published shapes (counted on the meta device against the published
parameter counts), and tiny builds of all four kinds loaded back with the Auto* classes the pipeline uses."""

from __future__ import annotations

import json
import shutil
import unicodedata

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from cory.schema import ConfigError, dotted_leaves
from cory.tasks.standins import (
    PROVENANCE,
    STANDINS,
    build_standin,
    imdb_texts,
    llama_tokenizer,
    make_model,
    parameter_count,
    profile_overlay,
    standin_config,
    wordpiece_tokenizer,
)
from pipeline.paths import ROOT

# The published totals (tied embeddings once): gpt2-large and gpt2-xl as OpenAI and the hub's model cards give them,
# Llama-2-7b's as Meta's; distilbert-imdb = distilbert-base-uncased (66,362,880) + pre_classifier 768x768+768
# + classifier 768x2+2.
PUBLISHED = {
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "distilbert-imdb": 66_955_010,
    "Llama-2-7b-chat-hf": 6_738_415_616,
}
ARCHITECTURES = {
    "gpt2-large": ("GPT2LMHeadModel", "GPT2Tokenizer"),
    "gpt2-xl": ("GPT2LMHeadModel", "GPT2Tokenizer"),
    "distilbert-imdb": ("DistilBertForSequenceClassification", "DistilBertTokenizer"),
    "Llama-2-7b-chat-hf": ("LlamaForCausalLM", "LlamaTokenizer"),
}
TOKENIZER_REVIEWS = 2000


@pytest.fixture(scope="module")
def texts():
    return imdb_texts(TOKENIZER_REVIEWS)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, texts):
    """All four stand-ins at scale tiny: {name: folder}."""
    root = tmp_path_factory.mktemp("standins")
    for name in STANDINS:
        build_standin(name, root / name, scale="tiny", texts=texts)
    return {name: root / name for name in STANDINS}


def load(name, folder):
    classifier = STANDINS[name].task == "sequence-classification"
    auto = AutoModelForSequenceClassification if classifier else AutoModelForCausalLM
    return auto.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


# --------------------------------------------------------------------------------------------------------------------
# Full size, on the meta device
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_full_size_parameter_counts_are_the_published_ones(name):
    assert parameter_count(name) == PUBLISHED[name] == STANDINS[name].params


def test_full_size_shapes_are_the_published_ones():
    with torch.device("meta"):
        llama = make_model("Llama-2-7b-chat-hf", standin_config("Llama-2-7b-chat-hf"))
        bert = make_model("distilbert-imdb", standin_config("distilbert-imdb"))
        xl = make_model("gpt2-xl", standin_config("gpt2-xl"))
    c = llama.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (4096, 32, 32, 32)
    assert (c.intermediate_size, c.vocab_size, c.max_position_embeddings, c.rms_norm_eps) == (11008, 32000, 4096, 1e-5)
    assert c.rope_parameters["rope_theta"] == 10000.0 and not c.tie_word_embeddings
    assert llama.lm_head.weight.shape == (32000, 4096)
    assert type(bert).__name__ == "DistilBertForSequenceClassification"
    assert (bert.config.dim, bert.config.n_layers, bert.config.vocab_size, bert.config.num_labels) == (768, 6, 30522, 2)
    assert bert.config.id2label == {0: "NEGATIVE", 1: "POSITIVE"}
    assert (xl.config.n_embd, xl.config.n_layer, xl.config.n_head) == (1600, 48, 25)
    assert xl.lm_head.weight is xl.transformer.wte.weight  # tied, as GPT-2's are


def test_shape_overrides_apply_over_the_scale_and_gpt2_vocab_is_fixed():
    assert standin_config("Llama-2-7b-chat-hf", "tiny", {"num_hidden_layers": 3})["num_hidden_layers"] == 3
    assert standin_config("Llama-2-7b-chat-hf", "tiny")["hidden_size"] == 32
    with pytest.raises(ValueError, match="GPT-2's tokenizer has 50257 tokens"):
        standin_config("gpt2-large", "tiny", {"vocab_size": 1000})
    with pytest.raises(ValueError, match="no stand-in 'gpt2'"):
        standin_config("gpt2")


# --------------------------------------------------------------------------------------------------------------------
# Tiny builds, loaded back
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(STANDINS))
def test_tiny_standin_loads_with_auto_classes_and_its_vocab_fits_its_tokenizer(tiny, name):
    model, tokenizer = load(name, tiny[name])
    assert (type(model).__name__, type(tokenizer).__name__) == ARCHITECTURES[name]
    assert model.config.vocab_size == len(tokenizer) == model.get_input_embeddings().weight.shape[0]
    assert model.dtype == getattr(torch, STANDINS[name].dtype)
    expected = standin_config(name, "tiny")
    assert all(getattr(model.config, key) == value for key, value in STANDINS[name].tiny.items() if key != "vocab_size")
    assert expected["vocab_size"] == len(tokenizer)
    record = json.loads((tiny[name] / PROVENANCE).read_text())
    assert record["stands_in_for"] == STANDINS[name].hub
    assert record["params"] == sum(p.numel() for p in model.parameters())
    ids = tokenizer("This movie was great", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model(input_ids=ids.clamp(max=model.config.vocab_size - 1)).logits
    assert torch.isfinite(out.float()).all() and out.shape[-1] == (2 if name == "distilbert-imdb" else len(tokenizer))


def test_the_reward_scores_decoded_text_with_its_own_uncased_wordpiece(tiny):
    from cory.tasks.rewards import SentimentReward
    from cory.tasks.tokenizer import load_tokenizer

    policy = load_tokenizer(str(tiny["gpt2-large"]))  # the pipeline's loader: pad = eos, left padding
    reward_tokenizer = AutoTokenizer.from_pretrained(tiny["distilbert-imdb"])
    assert policy.get_vocab() != reward_tokenizer.get_vocab()
    assert reward_tokenizer("Great FILM").input_ids == reward_tokenizer("great film").input_ids  # uncased ...
    assert not [t for t in reward_tokenizer.get_vocab() if t[0] != "[" and t != t.lower()]  # ... and so its vocabulary
    ids = reward_tokenizer("great film").input_ids
    assert (ids[0], ids[-1]) == (101, 102) and reward_tokenizer.pad_token_id == 0  # [CLS] ... [SEP], BERT's ids
    responses = policy.batch_decode(policy(["was a wonderful film", " and I hated it"]).input_ids)
    scores = SentimentReward(str(tiny["distilbert-imdb"]))(["This movie", "This movie"], responses)
    assert scores.shape == (2,) and scores.dtype == torch.float32 and torch.isfinite(scores).all()


def test_llama_tokenizer_is_sentencepiece_style_with_llama2s_chat_template(tiny):
    tokenizer = AutoTokenizer.from_pretrained(tiny["Llama-2-7b-chat-hf"])
    assert [tokenizer.convert_ids_to_tokens(i) for i in range(4)] == ["<unk>", "<s>", "</s>", "<0x00>"]
    ids = tokenizer("It cost 1234 dollars 🙂").input_ids
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert ids[0] == tokenizer.bos_token_id == 1 and tokenizer.eos_token_id == 2
    assert pieces[1].startswith("▁") and ["1", "2", "3", "4"] == [p for p in pieces if p.strip("▁").isdigit()]
    assert "<0xF0>" in pieces  # the emoji, unseen in training, falls back to its UTF-8 bytes ...
    assert tokenizer.decode(ids, skip_special_tokens=True) == "It cost 1234 dollars 🙂"  # ... and decodes back
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2? "},
            {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]
    assert tokenizer.apply_chat_template(chat, tokenize=False) == (
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is 2+2? [/INST] 4 </s><s>[INST] And 3+3? [/INST]"
    )
    with pytest.raises(Exception, match="must alternate"):
        tokenizer.apply_chat_template(chat[1:2] * 2, tokenize=False)


def kinds(piece: str) -> set[str]:
    """What a token's characters are: L (letters, marks), N (digits), ▁ (space), P (anything else)."""
    return {"L" if c.isalpha() or unicodedata.category(c)[0] == "M" else "N" if c.isnumeric() else "▁" if c == "▁"
            else "P" for c in piece}


def test_llama_tokens_stay_within_sentencepiece_pieces(tiny):
    vocab = AutoTokenizer.from_pretrained(tiny["Llama-2-7b-chat-hf"]).get_vocab()
    learnt = [t for t, i in vocab.items() if i >= 259]  # after unk, bos, eos and the 256 bytes
    for token in learnt:  # "▁"? + letters | one digit | "▁"? + other characters | "▁"s
        body = token[1:] if token.startswith("▁") and len(token) > 1 else token
        assert len(kinds(body)) == 1 and kinds(body) != {"N"} or body == token and len(body) == 1, token
    assert any(kinds(t) == {"▁", "P"} for t in learnt) and any(kinds(t) == {"▁", "L"} for t in learnt)


def test_weights_are_random_and_set_by_the_seed(tmp_path, texts):
    for folder, seed in (("a", 0), ("b", 0), ("c", 1)):
        build_standin("gpt2-large", tmp_path / folder, scale="tiny", seed=seed, texts=texts)
    a, b, c = (load_file(tmp_path / f / "model.safetensors") for f in "abc")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["transformer.h.0.attn.c_attn.weight"], c["transformer.h.0.attn.c_attn.weight"])


def test_a_vocabulary_the_text_cannot_fill_is_an_error(texts):
    with pytest.raises(ValueError, match="not the 30522 asked for"):
        wordpiece_tokenizer(texts[:5], 30522)
    with pytest.raises(ValueError, match="not the 32000 asked for"):
        llama_tokenizer(texts[:5], 32000)


# --------------------------------------------------------------------------------------------------------------------
# Pointing the paper profile at them
# --------------------------------------------------------------------------------------------------------------------


def test_overlay_replaces_exactly_the_paper_profiles_model_sources():
    from pipeline.profile import render

    overlay = dotted_leaves(profile_overlay({name: f"standins/{name}" for name in STANDINS}))
    paper = dotted_leaves(render("paper"))
    assert {setting: paper[setting] for setting in overlay} == {  # a KeyError: the overlay would add a setting
        "base_models.imdb_small.source": "gpt2-large",
        "base_models.imdb_large.source": "gpt2-xl",
        "reward_model.source": "lvwerra/distilbert-imdb",
        "base_models.math.source": "meta-llama/Llama-2-7b-chat-hf",
    }
    assert overlay["base_models.math.source"] == "standins/Llama-2-7b-chat-hf"


def test_build_script_writes_the_overlay_and_a_profile_differing_from_paper_just_there(tmp_path, monkeypatch, tiny):
    from pipeline.profile import render
    from tools import build_standins

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name in ("default", "paper"):
        shutil.copy(ROOT / "profiles" / f"{name}.yaml", profiles)
    monkeypatch.setattr("pipeline.profile.PROFILES", profiles)
    out = tmp_path / "standins"
    shutil.copytree(tiny["distilbert-imdb"], out / "distilbert-imdb")  # built by an earlier call: kept in the overlay
    build_standins.main([str(out), "--only", "gpt2-large", "--scale", "tiny", "--profile", "paper_standins",
                         "--offline-data"])
    changes = {
        "base_models.imdb_small.source": str(out / "gpt2-large"),
        "reward_model.source": str(out / "distilbert-imdb"),
        "data.imdb.source": "package",
    }
    assert build_standins.dotted_leaves(yaml.safe_load((out / "overlay.yaml").read_text())) == changes
    paper, standins = build_standins.dotted_leaves(render("paper")), build_standins.dotted_leaves(render("paper_standins"))
    assert {k: v for k, v in standins.items() if paper.get(k) != v} == {**changes, "profile": "paper_standins"}
    assert paper.keys() == standins.keys() and standins["base_models.imdb_large.source"] == "gpt2-xl"  # not built
    assert AutoConfig.from_pretrained(standins["reward_model.source"]).model_type == "distilbert"
    text = (profiles / "paper_standins.yaml").read_text()
    assert "!replace" in text and text.count(f'"{out}/') == 2  # paper.yaml edited in place, its tags kept
    build_standins.main([str(out), "--only", "gpt2-large", "--scale", "tiny", "--profile", "paper_standins"])
    assert "source: stanfordnlp/imdb" in (profiles / "paper_standins.yaml").read_text()  # rewritten from paper.yaml
    with pytest.raises(ConfigError, match="was not written by this script"):
        build_standins.write_profile("paper", changes)
