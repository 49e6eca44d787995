"""Task rewards r(s_0, a): pluggable scorers of (query, response) text.

A reward is any callable `reward(queries, responses, answers) -> scores` with `scores` a CPU float32 tensor of shape
(B,): one sentence-level task score per sample (the trainer adds the per-token KL penalty, Eq. 2).
`queries` are the raw task queries (not the prompt the policy saw), `responses` the decoded responses without EOS,
and `answers` the gold answers of tasks that have them (None otherwise).

- `MathReward` (GSM8K, docs/algorithm.md): 1 when the response's final answer equals the gold answer, else 0.
- `SentimentReward` (IMDB, docs/algorithm.md): the raw positive-class logit of a sequence classifier on query + response.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # torch is imported where a reward scores: the data stage that parses answers never loads it
    import torch

Reward = Callable[[list[str], list[str], "list[str] | None"], "torch.Tensor"]
"""(queries, responses, answers) -> task scores, CPU float32 (B,)."""

# --------------------------------------------------------------------------------------------------------------------
# GSM8K answers
# --------------------------------------------------------------------------------------------------------------------

_NUMBER = re.compile(
    r"(?:(?<![\w.)])-)?"  # a minus is a sign only where no operand precedes it ("10-5" is 10 and 5)
    r"\$?"
    r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+|(?=\.\d))"  # "1,234" (groups of exactly 3 digits), "1234", or ".5"
    r"(?:\.\d+)?"  # decimals; a bare trailing "." (end of sentence) is not part of the number
)


def canonical_number(token: str) -> str | None:
    """One number as written ("$1,000.00", "-5", "3.50") -> canonical text ("1000", "-5", "3.5"); None if not a number.

    Canonical texts are equal exactly when the numbers are equal, so "1,000" == "1000" == "1000.00".
    """
    token = token.strip()
    if not _NUMBER.fullmatch(token.removesuffix(".")):
        return None
    value = Decimal(token.removesuffix(".").replace("$", "").replace(",", ""))
    if value == value.to_integral_value():
        return str(int(value))  # also turns "-0" into "0"
    return format(value.normalize(), "f")


def extract_final_number(text: str) -> str | None:
    """The last number in `text`, canonicalised; None when the text has no number."""
    matches = _NUMBER.findall(text)
    return canonical_number(matches[-1]) if matches else None


def final_answer(text: str) -> str | None:
    """The answer a text gives: the first number after its first "####" if it has one, else its last number.

    Models trained on GSM8K-style solutions end them with "#### <answer>" and often ramble on afterwards (a new
    "Question: ..."), so the number right after the marker is their answer; without the marker we fall back to the
    paper's rule, "the final set of numbers" (docs/algorithm.md). None when no number is found where it is looked for.
    """
    head, marker, tail = text.partition("####")
    if marker:
        match = _NUMBER.search(tail)
        return canonical_number(match.group()) if match else None
    return extract_final_number(head)


def gsm8k_answer(solution: str) -> str:
    """The canonical gold answer of a GSM8K worked solution: the number after its "####"."""
    _, marker, tail = solution.partition("####")
    answer = canonical_number(tail) if marker else None
    if answer is None:
        excerpt = solution if len(solution) <= 120 else solution[:57] + " ... " + solution[-58:]
        raise ValueError(f'GSM8K solution has no "#### <number>" final answer: {excerpt!r}')
    return answer


def answers_match(a: str | None, b: str | None) -> bool:
    """Whether two numbers, as written ("1,000", "$1000.00", "1000"), are the same number."""
    if a is None or b is None:
        return False
    ca, cb = canonical_number(a), canonical_number(b)
    return ca is not None and ca == cb


class MathReward:
    """1.0 when the response's `final_answer` equals the gold answer, else 0.0 (docs/algorithm.md).

    A gold answer may be a bare number ("18", "1,080") or a whole worked solution ending in "#### 18".
    """

    def __call__(self, queries: list[str], responses: list[str], answers: list[str] | None) -> torch.Tensor:
        if answers is None:
            raise ValueError("MathReward needs the gold answers of the queries, got answers=None")
        if not (len(queries) == len(responses) == len(answers)):
            raise ValueError(
                f"MathReward got {len(queries)} queries, {len(responses)} responses and {len(answers)} answers"
            )
        gold = [gsm8k_answer(a) if "####" in a else canonical_number(a) for a in answers]
        for answer, value in zip(answers, gold):
            if value is None:
                raise ValueError(f"gold answer is not a number: {answer!r}")
        scores = [float(final_answer(r) == g) for r, g in zip(responses, gold)]  # (B,)
        import torch

        return torch.tensor(scores, dtype=torch.float32)


# --------------------------------------------------------------------------------------------------------------------
# Sentiment
# --------------------------------------------------------------------------------------------------------------------

def positive_label_index(id2label: dict[int, str], num_labels: int) -> int:
    """The class index whose label reads "POSITIVE" or "pos" (any case), else 1 (binary classifiers' convention)."""
    for index, label in id2label.items():
        if str(label).lower() in ("positive", "pos"):
            return int(index)
    if num_labels < 2:
        raise ValueError(f"cannot tell the positive class of a classifier with {num_labels} label(s)")
    return 1


def capacity(config, tokenizer) -> int:
    """How many tokens a classifier can read: its position embeddings' count (n_positions, max_position_embeddings)
    and its tokenizer's model_max_length, where they are set (a tokenizer without one says 1e30)."""
    limits = [getattr(config, name, None) for name in ("n_positions", "max_position_embeddings")]
    limits.append(getattr(tokenizer, "model_max_length", None))
    return min((int(n) for n in limits if isinstance(n, int) and 0 < n < 10**9), default=10**9)


class SentimentReward:
    """The raw positive-class logit (no softmax) of a sequence classifier on the text query + response.

    This is the paper's IMDB reward: `lvwerra/distilbert-imdb` with `function_to_apply="none"`, score of the
    POSITIVE class, on `query + response` (docs/algorithm.md). The model is called directly rather than through
    `pipeline`, whose `top_k=None` sorts the classes by score (the pitfall of §2.1). Padding is on the right so that
    models with absolute position embeddings see every text exactly as they would alone. Texts are scored
    `batch_size` at a time: 512 takes a CORY iteration's pioneer and observer texts (cory.rl.trainer scores both roles
    in one call) in one pass up to the paper's batch of 256, where each pass of a small classifier is mostly its host
    time.

    A text is cut to `max_length` of the classifier's tokens, and never to more than its positions (`capacity`): the
    end it keeps is the one it was trained on (`truncation` tail keeps the last tokens). A policy with another
    tokenizer can write a short response that is long in the classifier's: SmolLM2 has whitespace tokens of up to
    80 spaces, which GPT-2's tokenizer splits into up to 81 tokens, so 16 of them can exceed a 256-position
    classifier, whose position embedding would then read past its table (an IndexError on the CPU, a device-side
    assert in CUDA's gather kernel on a GPU).
    """

    def __init__(
        self,
        model_name_or_path: str,
        tokenizer_name_or_path: str | None = None,
        device: str = "cpu",
        batch_size: int = 512,
        max_length: int = 512,
        positive_index: int | None = None,
        truncation: str = "head",
    ) -> None:
        from transformers import AutoModelForSequenceClassification

        from cory.hf import load_pretrained
        from cory.tasks.tokenizer import load_tokenizer

        if batch_size <= 0 or max_length <= 0:
            raise ValueError(f"batch_size and max_length must be > 0, got {batch_size} and {max_length}")
        if truncation not in ("head", "tail"):
            raise ValueError(f"truncation must be 'head' or 'tail', got {truncation!r}")
        self.model = load_pretrained(
            AutoModelForSequenceClassification.from_pretrained, model_name_or_path, "sentiment classifier"
        )
        self.tokenizer = load_pretrained(load_tokenizer, tokenizer_name_or_path or model_name_or_path, "tokenizer")
        self.tokenizer.padding_side = "right"  # our own copy: load_tokenizer pads left, for generation
        self.tokenizer.truncation_side = "left" if truncation == "tail" else "right"
        if self.model.config.pad_token_id is None:
            # GPT-2-style classifiers find each text's last token through the pad id
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        num_labels = self.model.config.num_labels
        if positive_index is None:
            positive_index = positive_label_index(self.model.config.id2label, num_labels)
        if not 0 <= positive_index < num_labels:
            raise ValueError(f"positive_index {positive_index} is not a class of a {num_labels}-label classifier")
        self.positive_index = positive_index
        self.device = device
        self.batch_size = batch_size
        self.max_length = min(max_length, capacity(self.model.config, self.tokenizer))
        self.model.to(device).eval()

    def __call__(self, queries: list[str], responses: list[str], answers: list[str] | None = None) -> torch.Tensor:
        import torch

        if len(queries) != len(responses):
            raise ValueError(f"SentimentReward got {len(queries)} queries and {len(responses)} responses")
        texts = [q + r for q, r in zip(queries, responses)]
        scores = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                texts[start : start + self.batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device.startswith("cuda")):
                logits = self.model(**batch).logits  # (b, num_labels)
            scores.append(logits[:, self.positive_index].float().cpu())
        return torch.cat(scores) if scores else torch.zeros(0, dtype=torch.float32)  # (B,)


# --------------------------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------------------------

REWARDS: dict[str, type] = {"sentiment": SentimentReward, "math": MathReward}


def build_reward(kind: str, **kwargs) -> Reward:
    """The reward of a task: `build_reward("math")`, `build_reward("sentiment", model_name_or_path=..., ...)`."""
    if kind not in REWARDS:
        raise ValueError(f"unknown reward kind {kind!r}; choose one of {', '.join(REWARDS)}")
    return REWARDS[kind](**kwargs)
