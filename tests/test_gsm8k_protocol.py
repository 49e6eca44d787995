"""The authors' GSM8K evaluation protocol (cory.tasks.gsm8k_protocol, cory.evaluation.evaluate_authors_protocol): the
prompt, the answer parsing and comparison on literal strings, any-of-k on hand-made tables, and the sampler on a tiny
model (EOS drawn, sampling goes on)."""

import pytest
import torch

from cory.rl.config import GenerationConfig
from cory.schema import ConfigError, from_dict
from cory.tasks.evaluation import evaluate_authors_protocol
from cory.rl.rollout import generate
from cory.tasks.config import AuthorsProtocolConfig, EvalConfig
from cory.tasks.gsm8k_protocol import (
    INVALID, PROMPT_TEMPLATE, any_of_k, authors_prompt, clean_answer, gold_answer, is_correct,
)

from tiny import tiny_lm, tiny_tokenizer

# --------------------------------------------------------------------------------------------------------------------
# Prompt
# --------------------------------------------------------------------------------------------------------------------


def test_the_prompt_is_the_authors_string_with_its_quirks():
    assert authors_prompt("How many?") == (
        "Question: Shawn has five toys. For Christmas, he got two toys each fromhis mom and dad. How many toys does "
        "he have now?\nAnswer: Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 "
        "more toys. 5 + 4 = 9.\nQuestion: How many?\n Answer:"
    )
    assert PROMPT_TEMPLATE.count("{query}") == 1 and PROMPT_TEMPLATE.endswith("{query}\n Answer:")
    assert authors_prompt("a {brace} and {query}").count("{query}") == 1  # the question is inserted as it is


# --------------------------------------------------------------------------------------------------------------------
# Answers
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, answer",
    [
        # with "the answer is" (any case): the first number after it
        (" 5 + 4 = 9. The answer is 9.", "9"),
        ("So 3 + 4 = 7. THE ANSWER IS 7 apples, not 8.", "7"),
        ("the answer is: $1,234.", "1234"),
        ("The answer is 9. Question: Tom has 12 pens. Answer: 12", "9"),  # not the invented question's number
        # only up to a second "the answer is"; no number there is invalid, whatever comes before or after
        ("2 + 2 = 4. The answer is four. The answer is 4.", INVALID),
        ("I got 12. The answer is unknown.", INVALID),
        # without it: the last number of the whole completion
        ("5 + 4 = 9 toys. Question: Tom has 12 pens.", "12"),
        ("He pays 1,000 dollars and gets 2,500,000 back", "2500000"),
        # a trailing "." is stripped, decimals are kept as written
        ("so 18.", "18"),
        ("It costs 3.50 dollars", "3.50"),
        ("It costs 3.5.", "3.5"),
        ("He has 9.0 apples", "9.0"),
        ("The answer is 1234.00.", "1234.00"),
        # negative numbers, and a minus right after an operand read as a sign
        ("The change is -5 degrees", "-5"),
        ("10-5", "-5"),
        ("10 - 5 = 5", "5"),
        # no number at all
        ("I do not know.", INVALID),
        ("", INVALID),
    ],
)
def test_clean_answer_reads_the_authors_answer(completion, answer):
    assert clean_answer(completion) == answer


@pytest.mark.parametrize(
    "solution, answer",
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "72"),
        ("#### 1,234", "1234"),
        ("#### -3", "-3"),
        ("#### 0.5", "0.5"),
        ("#### 5.", "5."),  # the authors' regex keeps a trailing "."
        ("#### 18 then #### 19", "18"),  # the first one
    ],
)
def test_the_gold_answer_regex(solution, answer):
    assert gold_answer(solution) == answer


@pytest.mark.parametrize("solution", ["72", "The answer is 72", "####72", "#### x"])
def test_a_solution_without_the_gold_marker_is_an_error(solution):
    with pytest.raises(ValueError, match='needs a worked solution with "#### <number>"'):
        gold_answer(solution)


def test_answers_compare_as_exact_strings():
    assert is_correct("The answer is 9.", gold_answer("#### 9"))
    assert not is_correct("The answer is 9.0", gold_answer("#### 9"))  # "9.0" is not "9"
    assert not is_correct("The answer is 09", gold_answer("#### 9"))
    assert is_correct("so he paid 1,000", gold_answer("#### 1,000"))  # commas go on both sides
    assert not is_correct("I do not know", gold_answer("#### 9"))


# --------------------------------------------------------------------------------------------------------------------
# pass@k as any of k
# --------------------------------------------------------------------------------------------------------------------


def test_any_of_k_on_hand_made_tables():
    table = [[False, False, True], [True, False, False], [False, False, False], [False, True, True]]
    assert any_of_k(table) == 0.75
    assert [any_of_k(table, k) for k in (1, 2, 3)] == [0.25, 0.5, 0.75]
    assert any_of_k([[True]]) == 1.0 and any_of_k([[False], [False]]) == 0.0
    with pytest.raises(ValueError, match="1 <= k <= the samples of each problem \\(3\\)"):
        any_of_k(table, 4)
    with pytest.raises(ValueError, match="no problems"):
        any_of_k([])


# --------------------------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------------------------


def test_the_defaults_are_the_authors_values():
    cfg = AuthorsProtocolConfig()
    assert not cfg.enabled and cfg.ks == (1, 2, 3, 4, 5) and cfg.seed == 42 and cfg.resample_per_k
    gen = cfg.generation
    assert (gen.top_k, gen.top_p, gen.temperature, gen.repetition_penalty) == (10, 0.7, 1.0, 1.1)
    assert gen.response_length == (256, 256) and not gen.stop_at_eos and not gen.suppress_eos
    assert EvalConfig().authors_protocol == cfg


@pytest.mark.parametrize(
    "written, message",
    [
        ({"enable": True}, r"^evaluation\.authors_protocol\.enable: unknown setting; did you mean 'enabled'"),
        ({"ks": []}, r"^evaluation\.authors_protocol\.ks: must list at least one k"),
        ({"ks": [1, 0]}, r"^evaluation\.authors_protocol\.ks\[1\]: k must be >= 1, got 0"),
        ({"ks": [1, 2, 2]}, r"^evaluation\.authors_protocol\.ks: must not repeat a k"),
        ({"ks": [1, "2"]}, r"^evaluation\.authors_protocol\.ks\[1\]: must be an integer"),
        ({"top_p": 0}, r"^evaluation\.authors_protocol\.top_p: must be in \(0, 1\]"),
        ({"top_k": -1}, r"^evaluation\.authors_protocol\.top_k: must be >= 0"),
        ({"max_new_tokens": 0}, r"^evaluation\.authors_protocol\.max_new_tokens: must be > 0"),
        ({"temperature": 0.0}, r"^evaluation\.authors_protocol\.temperature: must be > 0"),
        ({"repetition_penalty": -1}, r"^evaluation\.authors_protocol\.repetition_penalty: must be > 0"),
        ({"enabled": "yes"}, r"^evaluation\.authors_protocol\.enabled: must be true or false"),
        ({"seed": 4.2}, r"^evaluation\.authors_protocol\.seed: must be an integer"),
    ],
)
def test_bad_settings_are_errors_naming_them(written, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(EvalConfig, {"authors_protocol": written}, "evaluation")


def test_its_ks_need_not_fit_the_unbiased_estimators_n_samples():
    cfg = from_dict(EvalConfig, {"n_samples": 2, "ks": [1, 2], "authors_protocol": {"ks": [1, 5]}}, "evaluation")
    assert cfg.authors_protocol.ks == (1, 5)


# --------------------------------------------------------------------------------------------------------------------
# The sampler: EOS does not stop a sample
# --------------------------------------------------------------------------------------------------------------------


def eos_prone_lm():
    """A tiny LM whose next token is drawn from fixed logits (an untied output layer of zeros with a bias): 0 for every
    word but EOS, 0.3 for EOS, so that top-k 10 keeps EOS among the 14 words and the authors' sampler draws it about
    once every 8 tokens."""
    lm = tiny_lm(n_positions=128)  # room for the authors' prompt
    lm.lm_head = torch.nn.Linear(lm.config.n_embd, lm.config.vocab_size, bias=True)
    lm.config.tie_word_embeddings = False
    torch.nn.init.zeros_(lm.lm_head.weight)
    torch.nn.init.zeros_(lm.lm_head.bias)
    with torch.no_grad():
        lm.lm_head.bias[0] = 0.3  # word 0 is EOS
    return lm.eval()


def test_eos_is_drawn_and_sampling_goes_on_past_it():
    lm, tokenizer, tokens = eos_prone_lm(), tiny_tokenizer(), 30
    prompts = ["the movie was"] * 8
    torch.manual_seed(0)
    stopping = generate(lm, tokenizer, prompts, GenerationConfig(), tokens)
    assert stopping.response_lengths.min() < tokens  # the usual sampler ends a response at its first EOS
    torch.manual_seed(0)
    rollout = generate(lm, tokenizer, prompts, AuthorsProtocolConfig(max_new_tokens=tokens).generation, tokens)
    ids = rollout.response_ids
    assert ids.shape == (8, tokens) and bool((rollout.response_lengths == tokens).all())  # every sample runs on
    eos = tokenizer.eos_token_id
    after_eos = [row[row.index(eos) + 1:] for row in ids.tolist() if eos in row]
    assert len(after_eos) >= 4  # EOS is drawn (not suppressed) ...
    assert any(token != eos for row in after_eos for token in row)  # ... and sampling goes on after it


# --------------------------------------------------------------------------------------------------------------------
# The evaluation on a tiny model
# --------------------------------------------------------------------------------------------------------------------

QUESTIONS = ["the movie", "a film", "the plot"]
SOLUTIONS = ["good\n#### 1", "bad\n#### 2", "x\n#### 3"]


class ScriptedTokenizer:
    """tiny_tokenizer() whose texts decoded for scoring (skip_special_tokens) are `texts`, in order: to hand the
    parser known completions."""

    def __init__(self, texts):
        self.inner, self.texts = tiny_tokenizer(), list(texts)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, *args, **kwargs):
        return self.inner(*args, **kwargs)

    def batch_decode(self, rows, skip_special_tokens=False):
        if not skip_special_tokens:  # the rollout's own texts
            return self.inner.batch_decode(rows)
        out, self.texts = self.texts[: len(rows)], self.texts[len(rows):]
        return out


def test_accuracy_is_any_of_k_over_the_parsed_samples():
    # resample_per_k: one draw of k samples per problem for each k (problem-major), k = 1 then k = 2
    texts = ["The answer is 1.", "no", "3",  # k = 1: problems 0 and 2 right
             "0", "1", "The answer is 2", "2", "9", "8"]  # k = 2: problem 0 (2nd sample) and problem 1 right
    cfg = AuthorsProtocolConfig(enabled=True, ks=(1, 2), max_new_tokens=3)
    result = evaluate_authors_protocol(tiny_lm(), ScriptedTokenizer(texts), QUESTIONS, SOLUTIONS, cfg, 4, n_examples=2)
    assert result["accuracy"] == {1: pytest.approx(2 / 3), 2: pytest.approx(2 / 3)}
    assert result["correct"] == {1: [1, 0, 1], 2: [1, 1, 0]}
    assert [(s["response"], s["parsed"], s["gold"], s["correct"]) for s in result["samples"]] == [
        ("0", "0", "1", False), ("The answer is 2", "2", "2", True)]  # the first sample of the largest k's draw
    # resample_per_k false: one draw of max(ks) samples; pass@k is any of the first k
    shared = AuthorsProtocolConfig(enabled=True, ks=(1, 2), max_new_tokens=3, resample_per_k=False)
    result = evaluate_authors_protocol(tiny_lm(), ScriptedTokenizer(texts[3:]), QUESTIONS, SOLUTIONS, shared, 4)
    assert result["accuracy"] == {1: pytest.approx(1 / 3), 2: pytest.approx(2 / 3)}
    assert result["correct"] == {1: [0, 1, 0], 2: [1, 1, 0]}


def test_the_evaluation_is_seeded_and_scores_past_eos_or_not():
    lm, tokenizer = eos_prone_lm(), tiny_tokenizer()
    cfg = AuthorsProtocolConfig(enabled=True, ks=(1, 3), max_new_tokens=12)
    result = evaluate_authors_protocol(lm, tokenizer, QUESTIONS, SOLUTIONS, cfg, 4, n_examples=3)
    assert set(result) == {"accuracy", "correct", "eos_rate", "samples"}
    assert result["eos_rate"] > 0.3  # about 1 - (7/8)^12 = 0.8 of the samples draw EOS
    words = [s["response"].split() for s in result["samples"]]
    assert not any("<eos>" in w for w in words) and any(len(w) < 12 for w in words)  # EOS dropped from the texts
    torch.manual_seed(123)  # the protocol seeds itself: the stream before it does not matter
    assert evaluate_authors_protocol(lm, tokenizer, QUESTIONS, SOLUTIONS, cfg, 4, n_examples=3) == result
    assert not torch.backends.cudnn.deterministic  # set back
    cut = AuthorsProtocolConfig(enabled=True, ks=(1, 3), max_new_tokens=12, score_after_eos=False)
    before_eos = evaluate_authors_protocol(lm, tokenizer, QUESTIONS, SOLUTIONS, cut, 4, n_examples=3)["samples"]
    for whole, cut_short in zip(result["samples"], before_eos):  # the same draw, cut at its first EOS
        assert whole["response"].startswith(cut_short["response"])
    assert any(len(cut["response"]) < len(whole["response"]) for cut, whole in zip(before_eos, result["samples"]))


def test_gold_answers_without_the_marker_fail_before_any_sampling():
    with pytest.raises(ValueError, match='needs a worked solution with "#### <number>"'):
        evaluate_authors_protocol(None, tiny_tokenizer(), QUESTIONS, ["1", "2", "3"], AuthorsProtocolConfig(), 4)
