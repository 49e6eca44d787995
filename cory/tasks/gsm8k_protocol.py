"""The authors' GSM8K evaluation protocol, its pure parts: prompt, answer extraction, comparison and
the empirical any-of-k accuracy. Each function does what the authors' published evaluation code,
gsm8k_utils/gsm8k_eval.py (with its helpers in gsm8k_utils/gsm8k_utils.py), does, quirks included, so that numbers
computed here can be set beside the paper's Fig. 5:

- the prompt is the 1-shot "Shawn" prompt of the paper's App. A.2 as the code writes it: newlines between the turns,
  " Answer:" after a newline and a space, and "from" and "his" joined without a space (two string literals
  concatenated without one);
- a completion's answer: lower-cased, split on "the answer is"; with the phrase, the first number of the text
  between its first and second occurrence (no number there: invalid, even if one comes before the phrase); without
  it, the last number of the whole completion. Commas are removed before numbers are found (regex `-?\\d+\\.?\\d*`,
  so a minus right after a digit, as in "10-5", is read as a sign), and one trailing "." is stripped;
- the gold answer: the first `#### (\\-?[0-9\\.\\,]+)` of the worked solution, commas removed (nothing else:
  "#### 5." stays "5.");
- the comparison: exact string equality ("9.0" is not "9", "09" is not "9");
- pass@k: k samples per problem, a problem counts if any of them is correct (n = k, not the unbiased estimator of
  cory.evaluation.pass_at_k), the mean over problems.

Sampling (top-k 10, top-p 0.7, temperature 1, repetition penalty 1.1, 256 new tokens that EOS does not end, seed 42)
is cory.settings.AuthorsProtocolConfig's, and cory.evaluation.evaluate_authors_protocol runs it. No torch here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

PROMPT_TEMPLATE = (
    "Question: Shawn has five toys. For Christmas, he got two toys each from"
    "his mom and dad. How many toys does he have now?\nAnswer: Shawn started with "
    "5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. "
    "5 + 4 = 9.\nQuestion: {query}\n Answer:"
)
"""The authors' evaluation prompt; "{query}" stands for the GSM8K question as it is."""

ANSWER_TRIGGER = "The answer is"
"""The phrase whose first following number is the answer (matched lower-case)."""

INVALID = "[invalid]"
"""The answer of a completion in which no number is found where it is looked for; it equals no gold answer."""

GOLD_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")
"""The gold answer of a GSM8K worked solution (the authors' ANS_RE)."""

NUMBER = re.compile(r"-?\d+\.?\d*")
"""A number of a completion, once its commas are removed."""


def authors_prompt(question: str) -> str:
    """The prompt the authors' code gives the model for one question."""
    return PROMPT_TEMPLATE.format(query=question)


def clean_answer(completion: str) -> str:
    """The answer the authors' code reads from a completion (a decoded response, without the prompt): a number as
    text, or INVALID."""
    parts = completion.lower().split(ANSWER_TRIGGER.lower())
    triggered = len(parts) > 1
    text = parts[1] if triggered else parts[-1]  # after the first trigger (up to a second one), else everything
    numbers = NUMBER.findall(text.replace(",", ""))
    if not numbers:
        return INVALID
    answer = numbers[0] if triggered else numbers[-1]
    return answer[:-1] if answer.endswith(".") else answer


def gold_answer(solution: str) -> str:
    """The gold answer of a GSM8K worked solution, as the authors' code reads it; a ValueError where it has none
    (their code asserts)."""
    match = GOLD_ANSWER.search(solution)
    if match is None:
        excerpt = solution if len(solution) <= 120 else solution[:57] + " ... " + solution[-58:]
        raise ValueError(f'the authors\' GSM8K protocol needs a worked solution with "#### <number>", got {excerpt!r}')
    return match.group(1).strip().replace(",", "")


def is_correct(completion: str, gold: str) -> bool:
    """Whether the completion's answer is the gold answer (`gold_answer`'s text), compared as strings."""
    return clean_answer(completion) == gold


def any_of_k(correct: Sequence[Sequence[bool]], k: int | None = None) -> float:
    """The authors' pass@k: the fraction of problems with a correct answer among their first k samples (all of
    them if k is None). `correct` is a (problems, samples) table of booleans, one row per problem."""
    if not correct:
        raise ValueError("any_of_k: no problems")
    width = min(len(row) for row in correct)
    k = width if k is None else k
    if not 1 <= k <= width:
        raise ValueError(f"any_of_k: need 1 <= k <= the samples of each problem ({width}), got k={k}")
    return sum(any(row[:k]) for row in correct) / len(correct)
