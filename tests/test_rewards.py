"""Task rewards: GSM8K answer parsing against the real test set, and the raw positive logit of a tiny classifier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cory.schema import ConfigError
from cory.tasks.rewards import (
    MathReward,
    SentimentReward,
    answers_match,
    build_reward,
    extract_final_number,
    final_answer,
    gsm8k_answer,
    positive_label_index,
)

GSM8K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"


@pytest.fixture
def hub_offline(monkeypatch):
    """Fail hub requests at once (as HF_HUB_OFFLINE=1 does) instead of retrying for ~25 s without a network."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


# --------------------------------------------------------------------------------------------------------------------
# Math
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, number",
    [
        ("He has 1,234 apples.", "1234"),  # thousands separator
        ("The total is 1,080,000 dollars", "1080000"),
        ("It is -5 degrees", "-5"),  # negative
        ("10-5=5", "5"),  # a minus between numbers is an operator, not a sign
        ("It costs $12.", "12"),  # dollar sign, trailing period
        ("It costs -$3", "-3"),
        ("The price is 3.50", "3.5"),  # decimals
        ("She pays 1,000.00 in total", "1000"),
        ("about .5 of it", "0.5"),
        ("12 apples, then 7!", "7"),  # trailing punctuation
        ("so 3*4=<<3*4=12>>12 apples", "12"),
        ("no number here", None),
    ],
)
def test_extract_final_number(text, number):
    assert extract_final_number(text) == number


def test_final_answer_prefers_the_number_after_the_first_marker():
    assert final_answer("So 3+4=<<3+4=7>>7\n#### 7\nQuestion: Tom has 99 pens") == "7"
    assert final_answer("#### 1,200 and #### 5") == "1200"
    assert final_answer("He has 3+4=7 and then 9") == "9"
    assert final_answer("#### nothing") is None


@pytest.mark.parametrize(
    "a, b, same",
    [("1,000", "1000", True), ("1000.00", "1000", True), ("$1,000", "1000.0", True), ("3.50", "3.5", True),
     ("-0", "0", True), ("5", "-5", False), ("1,2", "12", False), ("abc", "abc", False), (None, "1", False)],
)  # fmt: skip
def test_answers_match(a, b, same):
    assert answers_match(a, b) is same


def test_gsm8k_answer_names_the_problem_when_the_marker_is_missing():
    assert gsm8k_answer("2+2=<<2+2=4>>4\n#### 1,080") == "1080"
    with pytest.raises(ValueError, match="Tom has 4 pens"):
        gsm8k_answer("Tom has 4 pens and no final line")


def test_math_reward_scores_and_errors():
    reward = MathReward()
    scores = reward(
        ["q1", "q2", "q3", "q4"],
        ["so 18 eggs", "#### 1,000.00", "#### 5\nQuestion: 7", "no idea"],
        ["18", "He ... #### 1000", "7", "3"],
    )
    assert scores.dtype == torch.float32 and scores.shape == (4,)
    assert scores.tolist() == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="answers=None"):
        reward(["q"], ["1"], None)
    with pytest.raises(ValueError, match="1 queries, 1 responses and 2 answers"):
        reward(["q"], ["1"], ["1", "2"])
    with pytest.raises(ValueError, match="not a number"):
        reward(["q"], ["1"], ["eighteen"])


def test_every_gsm8k_test_solution_scores_one_against_its_answer_and_zero_against_another():
    path = GSM8K / "test.jsonl"
    if not path.is_file():
        pytest.skip(f"GSM8K test file not found at {path} (the repo's sibling shared/ folder)")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    solutions = [row["answer"] for row in rows]
    gold = [gsm8k_answer(s) for s in solutions]
    # another problem's answer: the next problem (cyclically) whose answer differs
    other = [next(gold[j % len(gold)] for j in range(i + 1, i + len(gold)) if gold[j % len(gold)] != g)
             for i, g in enumerate(gold)]  # fmt: skip
    queries = [row["question"] for row in rows]
    reward = MathReward()
    assert reward(queries, solutions, gold).sum().item() == len(rows)
    assert reward(queries, solutions, solutions).sum().item() == len(rows)
    assert reward(queries, solutions, other).sum().item() == 0


def test_build_reward():
    assert isinstance(build_reward("math"), MathReward)
    with pytest.raises(ValueError, match="unknown reward kind 'bleu'; choose one of sentiment, math"):
        build_reward("bleu")


# --------------------------------------------------------------------------------------------------------------------
# Sentiment
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer GPT-2 classifier and the offline GPT-2 tokenizer, saved to a folder."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from cory.tasks.tokenizer import load_tokenizer

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, num_labels=2, pad_token_id=50256)
    folder = tmp_path_factory.mktemp("classifier")
    GPT2ForSequenceClassification(config).save_pretrained(folder)
    load_tokenizer("offline-gpt2").save_pretrained(folder)
    return folder


def test_sentiment_reward_is_the_raw_positive_logit_whatever_the_batch(tiny_classifier):
    from transformers import AutoModelForSequenceClassification

    from cory.tasks.tokenizer import load_tokenizer

    queries = ["This movie", "I", "The acting was", "Worst"]
    responses = [" was great fun from start to end.", " loved it", " wooden", " film ever, truly awful and long"]
    model = AutoModelForSequenceClassification.from_pretrained(tiny_classifier).eval()
    tokenizer = load_tokenizer(str(tiny_classifier))
    with torch.no_grad():  # each text alone: no padding at all
        expected = torch.stack(
            [model(**tokenizer(q + r, return_tensors="pt")).logits[0, 1] for q, r in zip(queries, responses)]
        )

    for batch_size in (1, 3, 8):
        reward = SentimentReward(str(tiny_classifier), batch_size=batch_size)
        scores = reward(queries, responses, None)
        assert scores.dtype == torch.float32 and scores.shape == (4,) and scores.device.type == "cpu"
        torch.testing.assert_close(scores, expected, rtol=1e-5, atol=1e-5)


def test_sentiment_reward_positive_index(tiny_classifier):
    assert positive_label_index({0: "NEGATIVE", 1: "POSITIVE"}, 2) == 1
    assert positive_label_index({0: "pos", 1: "neg"}, 2) == 0
    assert positive_label_index({0: "LABEL_0", 1: "LABEL_1"}, 2) == 1
    with pytest.raises(ValueError, match="positive class"):
        positive_label_index({0: "score"}, 1)
    assert SentimentReward(str(tiny_classifier), positive_index=0).positive_index == 0
    with pytest.raises(ValueError, match="positive_index 2 is not a class of a 2-label classifier"):
        SentimentReward(str(tiny_classifier), positive_index=2)


def test_sentiment_reward_unloadable_models(tmp_path, hub_offline):
    with pytest.raises(ConfigError, match="^sentiment classifier: .*: no such local folder"):
        SentimentReward(str(tmp_path / "missing" / "classifier"))
    with pytest.raises(ConfigError, match="the local folder cannot be loaded"):
        SentimentReward(str(tmp_path))
    with pytest.raises(ConfigError, match="hub is unreachable.*point at a local folder"):
        SentimentReward("lvwerra/distilbert-imdb")


@pytest.fixture(scope="module")
def short_classifier(tmp_path_factory) -> Path:
    """A GPT-2 classifier of 16 positions with the offline GPT-2 tokenizer: as the profile's reward model, whose
    positions a policy with another tokenizer can outrun."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from cory.tasks.tokenizer import load_tokenizer

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=16, num_labels=2, pad_token_id=50256)
    folder = tmp_path_factory.mktemp("short_classifier")
    GPT2ForSequenceClassification(config).save_pretrained(folder)
    load_tokenizer("offline-gpt2").save_pretrained(folder)
    return folder


def logit_of(folder: Path, ids: list[int]) -> torch.Tensor:
    """The positive logit of the classifier on exactly these token ids."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, 1]


@pytest.mark.parametrize("truncation", ["head", "tail"])
def test_a_text_longer_than_the_classifiers_positions_is_cut_to_them_on_its_trained_side(short_classifier,
                                                                                          truncation):
    """A response of whitespace runs (SmolLM2 writes runs of up to 80 spaces as one token; GPT-2's tokenizer splits
    them into up to 81) makes a text far longer than 16 positions: it is scored on its first (head) or last (tail)
    16 tokens, whatever max_length asks, where the position embedding would otherwise read past its table."""
    from cory.tasks.tokenizer import load_tokenizer

    query, response = "The movie", " was" + " " * 80 + "\n" + " " * 40 + "great fun"
    ids = load_tokenizer(str(short_classifier))(query + response)["input_ids"]
    assert len(ids) > 16
    side = {} if truncation == "head" else {"truncation": "tail"}  # head: the default, as the run built it before
    for max_length in (512, 16, 64):
        reward = SentimentReward(str(short_classifier), max_length=max_length, **side)
        scores = reward([query, "I"], [response, " liked it"])
        kept = ids[:16] if truncation == "head" else ids[-16:]
        torch.testing.assert_close(scores[0], logit_of(short_classifier, kept), rtol=1e-5, atol=1e-5)
    reward = SentimentReward(str(short_classifier), max_length=8, truncation=truncation)  # a shorter setting wins
    kept = ids[:8] if truncation == "head" else ids[-8:]
    torch.testing.assert_close(reward([query], [response])[0], logit_of(short_classifier, kept), rtol=1e-5, atol=1e-5)


def test_texts_within_the_limit_score_exactly_as_before(tiny_classifier):
    """The cut changes nothing for texts the classifier reads whole: the scores are bit for bit those of the texts
    tokenized as before (right truncation at 512, which these texts never reach)."""
    from transformers import AutoModelForSequenceClassification

    queries = ["This movie", "I", "The acting was", "Worst"]
    responses = [" was great fun from start to end.", " loved it", " wooden", " film ever, truly awful and long"]
    before = SentimentReward(str(tiny_classifier))
    model = AutoModelForSequenceClassification.from_pretrained(tiny_classifier).eval()
    model.config.pad_token_id = before.tokenizer.pad_token_id
    batch = before.tokenizer([q + r for q, r in zip(queries, responses)], padding=True, truncation=True,
                             max_length=512, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).logits[:, 1]
    for truncation in ("head", "tail"):
        scores = SentimentReward(str(tiny_classifier), max_length=64, truncation=truncation)(queries, responses)
        assert torch.equal(scores, expected)


def test_the_profiles_classifier_reads_the_lengths_it_was_trained_with():
    """tasks.<task>.reward_max_length and reward_truncation come from reward_model.classifier for the profile's own
    classifier (the default profile's: 256, tail) and may not be written beside it."""
    from pipeline.params import validate
    from pipeline.profile import render

    params = render("default")
    tree = validate(params)
    assert (tree.tasks["imdb"].reward_max_length, tree.tasks["imdb"].reward_truncation) == (256, "tail")
    job = tree.jobs["imdb_smollm2"][0]
    assert (job.task.reward_max_length, job.task.reward_truncation) == (256, "tail")
    params["tasks"]["imdb"]["reward_max_length"] = 128
    with pytest.raises(ConfigError, match="tasks.imdb.reward_max_length: comes from reward_model.classifier."
                                          "max_length"):
        validate(params)
