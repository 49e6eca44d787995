"""Base LMs and the reward classifier: shapes, the padded-head loss, learning on toy data, save/load, the stages."""


import huggingface_hub

import pytest
import torch
import torch.nn.functional as F
from tiny import WORDS, tok, toy_sentiment  # noqa: F401 (tok: the tiny tokenizer, a fixture)
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from cory.schema import ConfigError, from_dict
from cory.tasks.classifier import build_classifier, classifier_accuracy, train_reward_classifier
from cory.tasks.config import ClassifierConfig
from cory.hf import count_parameters, load_pretrained, save_model
from cory.tasks.config import LMConfig, PretrainConfig
from cory.tasks.pretrain import build_causal_lm, lm_loss, pretrain_lm, sample_texts

TINY = LMConfig(n_layer=2, n_embd=32, n_head=2, n_positions=64, dropout=0.0)


def test_parameter_count_is_gpt2s_formula():
    vocab, d, layers, positions = 101, 32, 3, 40
    model = build_causal_lm(LMConfig(n_layer=layers, n_embd=d, n_head=4, n_positions=positions), vocab, 0)
    # tied embeddings + positions + per block (4 matrices with biases, 2 layer norms) + final layer norm
    assert count_parameters(model) == vocab * d + positions * d + layers * (12 * d * d + 13 * d) + 2 * d


def test_padded_head_loss_equals_the_models_own_loss():
    model = build_causal_lm(TINY, 101, 0).eval()  # 101 rows: padded to 128 inside lm_loss
    window = torch.randint(0, 101, (3, 9))
    expected = F.cross_entropy(model(input_ids=window[:, :-1]).logits.flatten(0, 1), window[:, 1:].flatten())
    loss = lm_loss(model, window)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(lm_loss(model, window, reduction="sum"), expected * 24)
    loss.backward()
    grad = model.transformer.wte.weight.grad.clone()
    model.zero_grad()
    expected.backward()
    torch.testing.assert_close(grad, model.transformer.wte.weight.grad)


def test_pretraining_learns_a_repetitive_corpus(tok):
    texts = ["the movie was very good and the plot was good"] * 20
    model = build_causal_lm(TINY, len(tok), tok.eos_token_id)
    cfg = PretrainConfig(steps=40, batch_tokens=128, seq_len=16, learning_rate=1e-2, warmup_steps=5, eval_every=20)
    metrics = pretrain_lm(model, tok, texts, texts[:2], cfg, "cpu")
    assert [row["step"] for row in metrics["history"]] == [20, 40]
    # from about ln(14) = 2.6 at random init; what is left is mostly each window's unpredictable first token
    assert metrics["val_loss"] < 0.7 and metrics["history"][0]["val_loss"] > metrics["val_loss"]
    assert metrics["val_perplexity"] == pytest.approx(torch.tensor(metrics["val_loss"]).exp().item())
    assert metrics["params"] == count_parameters(model) and metrics["tokens_per_second"] > 0
    continuation = sample_texts(model, tok, ["the movie"], 4, "cpu", seed=0)
    assert continuation[0].split()[:2] == ["was", "very"]


def test_epochs_set_the_number_of_steps(tok):
    texts = ["good movie"] * 16  # 16 * 3 tokens (with EOS) = 48 tokens
    model = build_causal_lm(TINY, len(tok), tok.eos_token_id)
    metrics = pretrain_lm(model, tok, texts, texts, PretrainConfig(epochs=2.0, batch_tokens=16, seq_len=8), "cpu")
    assert metrics["steps"] == 6


def test_micro_batches_take_the_same_step(tok):
    # the step's windows in equal slices, gradients summed: the same weights up to float rounding (no dropout, whose
    # masks are drawn per forward), the same loss history
    texts = [f"the movie was {w} and the plot was {v}" for w, v in zip(WORDS * 3, reversed(WORDS * 3))]
    runs = []
    for micro_batches in (1, 4):
        torch.manual_seed(0)
        model = build_causal_lm(TINY, len(tok), tok.eos_token_id)
        cfg = PretrainConfig(steps=6, batch_tokens=128, micro_batches=micro_batches, seq_len=16, learning_rate=1e-2,
                             warmup_steps=2, eval_every=3)
        runs.append((model, pretrain_lm(model, tok, texts, texts[:4], cfg, "cpu")))
    (one, whole), (four, sliced) = runs
    for a, b in zip(one.parameters(), four.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # Adam: ~lr per step
    for a, b in zip(whole["history"], sliced["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-5)


def test_regional_compilation_takes_the_eager_steps_and_leaves_the_blocks_eager(tok):
    """pretrain.compile "regional": each block compiled in place, one compilation they share; the same losses as the
    eager steps up to float rounding (inductor's fused kernels), and the blocks are plain modules again afterwards."""
    from torch._dynamo.utils import counters

    texts = [f"the movie was {w} and the plot was {v}" for w, v in zip(WORDS * 3, reversed(WORDS * 3))]
    runs = []
    for mode in (False, "regional"):
        torch.manual_seed(0)
        model = build_causal_lm(TINY, len(tok), tok.eos_token_id)
        cfg = PretrainConfig(steps=4, batch_tokens=128, seq_len=16, learning_rate=1e-2, warmup_steps=2, eval_every=2,
                             compile=mode)
        counters.clear()
        runs.append((model, pretrain_lm(model, tok, texts, texts[:4], cfg, "cpu")))
    (_, eager), (compiled, regional) = runs
    assert counters["stats"]["unique_graphs"] >= 2  # a block and the output layer did run compiled
    # one graph per block function, not per block: 2 blocks x (train, eval) would be 4 + the output layer's
    assert counters["stats"]["unique_graphs"] <= 4
    for a, b in zip(eager["history"], regional["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-4)
    assert all(block._compiled_call_impl is None for block in compiled.transformer.h)
    with pytest.raises(ConfigError, match=r"pretrain.compile"):
        from_dict(PretrainConfig, {"compile": "everything"}, "pretrain")


def test_regional_compilation_of_a_model_without_blocks_names_the_setting():
    from cory.tasks.pretrain import compiled_loss

    model = torch.nn.Module()
    model.base_model = torch.nn.Linear(2, 2)  # no list of blocks to compile one by one
    with pytest.raises(ConfigError, match=r"pretrain.compile: 'regional' .* Linear has none"):
        with compiled_loss(model, "regional"):
            pass


def test_pretrain_config_errors_name_the_setting():
    with pytest.raises(ConfigError, match=r"base_models.x.pretrain.batch_tokens: must be a positive multiple of seq_len"):
        from_dict(PretrainConfig, {"batch_tokens": 100, "seq_len": 64}, "base_models.x.pretrain")
    with pytest.raises(ConfigError, match=r"base_models.x.pretrain.micro_batches: must be >= 1 and divide the step's 4 "):
        from_dict(PretrainConfig, {"batch_tokens": 256, "seq_len": 64, "micro_batches": 3}, "base_models.x.pretrain")
    with pytest.raises(ConfigError, match=r"lm.n_head: must divide n_embd"):
        from_dict(LMConfig, {"n_embd": 30, "n_head": 4}, "lm")


def test_classifier_learns_a_separable_toy_task(tok):
    texts, labels = toy_sentiment(64)
    cfg = ClassifierConfig(epochs=4, batch_size=16, learning_rate=3e-3, warmup_steps=2, max_length=16, lm=TINY)
    model, metrics = train_reward_classifier(texts, labels, texts[:10], labels[:10], tok, cfg, "cpu")
    assert metrics["accuracy"] == 1.0
    assert metrics["accuracy_prefix32"] == 1.0
    assert [row["epoch"] for row in metrics["history"]] == [1.0, 2.0, 3.0, 4.0]
    assert model.config.id2label == {0: "NEGATIVE", 1: "POSITIVE"}


def test_classifier_accuracy_reads_the_last_real_token_under_padding(tok):
    model = build_classifier(tok, ClassifierConfig(lm=TINY)).eval()
    texts = ["good", "the movie was very good and the plot"]  # very different lengths: the first is padded
    batch = tok(texts, padding=True, padding_side="right", return_tensors="pt")
    alone = torch.stack([model(**tok([t], return_tensors="pt")).logits[0] for t in texts])
    torch.testing.assert_close(model(**batch).logits, alone)
    predicted = alone.argmax(-1).tolist()
    assert classifier_accuracy(model, tok, texts, predicted, 16, "cpu") == 1.0


def test_tail_truncation_reads_the_end_of_a_long_review(tok):
    from cory.tasks.classifier import _encode_reviews

    head, lengths = _encode_reviews(tok, ["the movie was very good"], 2)
    tail, _ = _encode_reviews(tok, ["the movie was very good"], 2, tail=True)
    assert tok.decode(head[0]).split() == ["the", "movie"] and tok.decode(tail[0]).split() == ["very", "good"]
    assert lengths.tolist() == [2]
    model = build_classifier(tok, ClassifierConfig(lm=TINY)).eval()
    texts = ["the movie was very good", "a plot not very good"]
    ends = model(**tok(["very good", "very good"], return_tensors="pt")).logits.argmax(-1).tolist()
    assert classifier_accuracy(model, tok, texts, ends, 2, "cpu", truncation="tail") == 1.0
    assert tok.truncation_side == "right"  # restored


def test_classifier_starts_from_the_lms_body(tok, tmp_path):
    lm = build_causal_lm(TINY, len(tok), tok.eos_token_id)
    save_model(lm, tok, tmp_path)
    classifier = build_classifier(tok, ClassifierConfig(), init_from=tmp_path)
    torch.testing.assert_close(classifier.transformer.h[1].mlp.c_fc.weight, lm.transformer.h[1].mlp.c_fc.weight)
    assert classifier.config.pad_token_id == tok.pad_token_id and classifier.config.num_labels == 2


def test_save_and_load_with_plain_transformers(tok, tmp_path):
    lm = build_causal_lm(TINY, len(tok), tok.eos_token_id).eval()
    save_model(lm, tok, tmp_path / "lm")
    assert (tmp_path / "lm" / "model.safetensors").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "lm").eval()
    ids = torch.tensor([[2, 3, 4, 5]])
    torch.testing.assert_close(loaded(input_ids=ids).logits, lm(input_ids=ids).logits)
    assert AutoTokenizer.from_pretrained(tmp_path / "lm").convert_ids_to_tokens([2, 3]) == WORDS[2:4]

    classifier = build_classifier(tok, ClassifierConfig(lm=TINY)).eval()
    save_model(classifier, tok, tmp_path / "reward")
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path / "reward").eval()
    torch.testing.assert_close(again(input_ids=ids).logits, classifier(input_ids=ids).logits)
    assert again.config.id2label == {0: "NEGATIVE", 1: "POSITIVE"}


def test_loading_says_the_hub_is_unreachable_offline(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match=r"base_models.imdb_small.source: 'gpt2-large' .*hub is unreachable"):
        load_pretrained(AutoModelForCausalLM.from_pretrained, "gpt2-large", "base_models.imdb_small.source")
    with pytest.raises(ConfigError, match="the local folder cannot be loaded"):
        load_pretrained(AutoModelForCausalLM.from_pretrained, str(tmp_path), "reward_model.source")
