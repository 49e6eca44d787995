"""Grade-school math word problems in GSM8K's format: the offline stand-in for GSM8K for small from-scratch models.

A problem is {"question": str, "answer": str}. The answer is a worked solution, one short sentence per arithmetic
step, each with a GSM8K calculator annotation, then the final line "#### <number>", e.g.

    Mia has 7 stickers. She buys 3 packs of 4 stickers. How many stickers does Mia have now?
    The packs hold 3*4=<<3*4=12>>12 stickers.
    So she has 7+12=<<7+12=19>>19 stickers.
    #### 19

Problems come from two story shapes told in several themes: a chain of events that changes one person's amount
(collecting, money, baking, a walk away from home), and a chain of comparisons between people (how many each has,
ages). Every number is an integer; stated numbers are at most `max_operand`, results at most `max_result` and never
negative. `min_steps`..`max_steps` and these two bounds are the difficulty knobs.

Difficulty, measured (H200; a 30M GPT-2, 6 layers x 384, trained from scratch on 20k problems + 30% observer-style
examples, batch 64 x 256 tokens, AdamW 1e-3 cosine; pass@1 on 500 test problems, greedy / sampled at temperature 1):
2-3 steps, numbers <= 20, results <= 200: 87% / 80% after 75 s (too easy to leave RL room); <= 40 / <= 500 with
2-4 steps: 62% / 51%; the default, 2-3 steps, <= 99 / <= 1000: 28% / 21% after 50 s, 43% / 31% after 75 s,
45% / 34% after 100 s.

The paper's GSM8K observer sees "Question: {q} Reference: {pioneer answer} Answer:" (docs/algorithm.md);
`format_example_with_reference` teaches a small model that format, with references that are sometimes wrong.
"""

from __future__ import annotations

import random
import re
from decimal import Decimal

from cory.schema import check, section_path
from cory.tasks.config import MathGenConfig
from cory.tasks.rewards import canonical_number, gsm8k_answer


# --------------------------------------------------------------------------------------------------------------------
# Story templates. Question sentences use {x} (amount before), {b}, {c} (stated numbers); solution sentences use
# {calc} (e.g. "3*4=<<3*4=12>>12"), {calc2} (the second step of a two-step event), {p}/{P} for she/he, {poss}.
# --------------------------------------------------------------------------------------------------------------------

NAMES = [
    ("Mia", "she"), ("Liam", "he"), ("Ava", "she"), ("Noah", "he"), ("Zoe", "she"), ("Omar", "he"), ("Lena", "she"),
    ("Ravi", "he"), ("Emma", "she"), ("Jack", "he"), ("Sofia", "she"), ("Leo", "he"), ("Nora", "she"), ("Sam", "he"),
    ("Aisha", "she"), ("Ben", "he"), ("Chloe", "she"), ("Diego", "he"), ("Ivy", "she"), ("Kenji", "he"),
]
FRIENDS = ["a friend", "a neighbor", "a classmate", "a cousin", "the teacher"]

EVENT_THEMES = {
    "collecting": {
        "units": ["stickers", "marbles", "stamps", "seashells", "trading cards", "beads", "pencils", "apples"],
        "start": "{name} has {x} {unit}.",
        "question": "How many {unit} does {name} have now?",
        "add": ("{P} finds {b} more {unit}.", ["{P} finds {b} more, so {p} has {calc} {unit}."]),
        "sub": ("{P} gives {b} {unit} to {friend}.", ["{P} gives away {b}, so {p} has {calc} {unit}."]),
        "add_group": (
            "{P} buys {b} packs of {c} {unit}.",
            ["The packs hold {calc} {unit}.", "So {p} has {calc2} {unit}."],
        ),
        "sub_group": (
            "{P} gives {b} friends {c} {unit} each.",
            ["{P} gives away {calc} {unit}.", "So {p} has {calc2} {unit} left."],
        ),
        "half": ("{P} gives half of {poss} {unit} to {friend}.", ["{P} keeps {calc} {unit}."]),
        "share": (
            "{P} shares them equally among {b} friends. How many {unit} does each friend get?",
            ["Each friend gets {calc} {unit}."],
        ),
    },
    "money": {
        "units": ["dollars"],
        "chores": ["washing a car", "walking a dog", "mowing a lawn", "helping a neighbor"],
        "buys": ["a book", "a hat", "a game", "lunch", "a ticket"],
        "goods": ["cupcakes", "bracelets", "drawings", "lemonades"],
        "start": "{name} has ${x}.",
        "question": "How many dollars does {name} have now?",
        "add": ("{P} earns ${b} for {chore}.", ["{P} earns {b} dollars, so {p} has {calc} dollars."]),
        "sub": ("{P} spends ${b} on {buy}.", ["{P} spends {b} dollars, so {p} has {calc} dollars."]),
        "add_group": (
            "{P} sells {b} {goods} for ${c} each.",
            ["The {goods} bring in {calc} dollars.", "So {p} has {calc2} dollars."],
        ),
        "sub_group": (
            "{P} buys {b} notebooks that cost ${c} each.",
            ["The notebooks cost {calc} dollars.", "So {p} has {calc2} dollars left."],
        ),
        "half": ("{P} puts half of {poss} money in the bank.", ["{P} keeps {calc} dollars."]),
        "share": (
            "{P} splits the money equally among {b} children. How many dollars does each child get?",
            ["Each child gets {calc} dollars."],
        ),
    },
    "baking": {
        "units": ["cookies", "muffins", "cupcakes", "rolls", "pies"],
        "start": "{name} bakes {x} {unit}.",
        "question": "How many {unit} does {name} have now?",
        "add": ("{P} bakes {b} more {unit}.", ["{P} bakes {b} more, so {p} has {calc} {unit}."]),
        "sub": ("{P} eats {b} of the {unit}.", ["After eating {b}, {p} has {calc} {unit}."]),
        "add_group": (
            "{P} bakes {b} more trays with {c} {unit} on each tray.",
            ["The trays hold {calc} {unit}.", "So {p} has {calc2} {unit}."],
        ),
        "sub_group": (
            "{P} sells {b} boxes with {c} {unit} in each box.",
            ["{P} sells {calc} {unit}.", "So {p} has {calc2} {unit} left."],
        ),
        "half": ("{P} gives half of the {unit} to {friend}.", ["{P} keeps {calc} {unit}."]),
        "share": (
            "{P} packs them equally into {b} bags. How many {unit} are in each bag?",
            ["Each bag holds {calc} {unit}."],
        ),
    },
    "travel": {
        "units": ["km", "miles"],
        "start": "{name} walks {x} {unit} away from home.",
        "question": "How many {unit} from home is {name} now?",
        "add": ("Then {p} walks {b} {unit} further.", ["{P} walks {b} more, so {p} is {calc} {unit} from home."]),
        "sub": ("Then {p} walks {b} {unit} back toward home.", ["{P} walks back {b}, so {p} is {calc} {unit} away."]),
        "add_group": (
            "Then {p} rides a bike away from home for {b} hours at {c} {unit} per hour.",
            ["{P} rides {calc} {unit}.", "So {p} is {calc2} {unit} from home."],
        ),
        "sub_group": (
            "Then {p} drives back toward home for {b} hours at {c} {unit} per hour.",
            ["{P} drives {calc} {unit}.", "So {p} is {calc2} {unit} from home."],
        ),
    },
}

COMPARE_THEMES = {
    "counts": {
        "units": ["stickers", "marbles", "books", "toy cars", "shells", "coins"],
        "start": "{name} has {x} {unit}.",
        "more": "{name} has {b} more {unit} than {prev}.",
        "fewer": "{name} has {b} fewer {unit} than {prev}.",
        "times": "{name} has {k} as many {unit} as {prev}.",
        "fraction": "{name} has {k} as many {unit} as {prev}.",
        "step": "{name} has {calc} {unit}.",
        "question": "How many {unit} does {name} have?",
        "total": ("How many {unit} do they have altogether?", "Altogether they have {calc} {unit}."),
    },
    "ages": {
        "units": ["years"],
        "start": "{name} is {x} years old.",
        "more": "{name} is {b} years older than {prev}.",
        "fewer": "{name} is {b} years younger than {prev}.",
        "times": "{name} is {k} as old as {prev}.",
        "fraction": "{name} is {k} as old as {prev}.",
        "step": "{name} is {calc} years old.",
        "question": "How old is {name}?",
        "total": ("What is the sum of their ages?", "The sum of their ages is {calc} years."),
    },
}
TIMES_WORDS = {2: "twice", 3: "three times", 4: "four times", 5: "five times"}
FRACTION_WORDS = {2: "half", 3: "a third", 4: "a quarter", 5: "a fifth"}
STEP_COST = {"add": 1, "sub": 1, "add_group": 2, "sub_group": 2, "half": 1, "share": 1,
             "more": 1, "fewer": 1, "times": 1, "fraction": 1, "total": 1}  # fmt: skip


def calc(a: int, op: str, b: int) -> tuple[str, int]:
    """GSM8K's annotated step "a*b=<<a*b=c>>c" and its value c (an exact integer by construction)."""
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    expr = f"{a}{op}{b}"
    return f"{expr}=<<{expr}={value}>>{value}", value


def _operands(rng: random.Random, cfg: MathGenConfig, op: str, x: int) -> tuple[int, ...] | None:
    """Stated numbers for `op` applied to amount x, or None when no integer, in-bounds choice exists."""
    top, room = cfg.max_operand, cfg.max_result - x
    if op in ("add", "more"):
        return (rng.randint(2, min(top, room)),) if min(top, room) >= 2 else None
    if op in ("sub", "fewer"):
        return (rng.randint(2, min(top, x - 1)),) if x >= 3 else None
    if op in ("add_group", "sub_group"):
        budget = room if op == "add_group" else x - 1
        counts = [b for b in range(2, top + 1) if 2 * b <= budget]
        if not counts:
            return None
        b = rng.choice(counts)
        return b, rng.randint(2, min(top, budget // b))
    if op == "times":
        ks = [k for k in TIMES_WORDS if k * x <= cfg.max_result]
        return (rng.choice(ks),) if ks else None
    if op == "fraction":
        ks = [k for k in FRACTION_WORDS if x % k == 0]
        return (rng.choice(ks),) if ks else None
    if op == "half":
        return (2,) if x % 2 == 0 else None
    if op == "share":
        ks = [k for k in range(2, min(top, x) + 1) if x % k == 0]
        return (rng.choice(ks),) if ks else None
    raise ValueError(f"unknown step kind {op!r}")


def _plan(rng: random.Random, kinds: list[str], final_kinds: list[str], n_steps: int) -> list[str]:
    """A sequence of event kinds whose step costs add up to n_steps; a final-only kind may end it."""
    plan, left = [], n_steps
    while left > 0:
        options = [k for k in kinds if STEP_COST[k] <= left]
        if left == 1:
            options += final_kinds
        plan.append(rng.choice(options))
        left -= STEP_COST[plan[-1]]
    return plan


def _event_story(rng: random.Random, cfg: MathGenConfig, n_steps: int) -> dict[str, str] | None:
    theme = EVENT_THEMES[rng.choice(sorted(EVENT_THEMES))]
    name, pronoun = rng.choice(NAMES)
    words = {"name": name, "p": pronoun, "P": pronoun.capitalize(), "poss": "her" if pronoun == "she" else "his",
             "unit": rng.choice(theme["units"]), "friend": rng.choice(FRIENDS),
             "chore": rng.choice(theme.get("chores", [""])), "buy": rng.choice(theme.get("buys", [""])),
             "goods": rng.choice(theme.get("goods", [""]))}  # fmt: skip
    kinds = [k for k in ("add", "sub", "add_group", "sub_group", "half") if k in theme]
    plan = _plan(rng, kinds, ["share"] if "share" in theme else [], n_steps)
    x = rng.randint(2, cfg.max_operand)
    question, lines = [theme["start"].format(x=x, **words)], []
    for kind in plan:
        operands = _operands(rng, cfg, kind, x)
        if operands is None:
            return None
        asked, solved = theme[kind]
        if kind in ("add_group", "sub_group"):
            b, c = operands
            first, product = calc(b, "*", c)
            second, y = calc(x, "+" if kind == "add_group" else "-", product)
            question.append(asked.format(b=b, c=c, **words))
            lines += [solved[0].format(calc=first, **words), solved[1].format(calc2=second, **words)]
        else:
            (b,) = operands
            op = {"add": "+", "sub": "-", "half": "/", "share": "/"}[kind]
            step, y = calc(x, op, b)
            question.append(asked.format(b=b, **words))
            lines.append(solved[0].format(b=b, calc=step, **words))
        x = y
    if plan[-1] != "share":
        question.append(theme["question"].format(**words))
    return _problem(question, lines, x)


def _compare_story(rng: random.Random, cfg: MathGenConfig, n_steps: int) -> dict[str, str] | None:
    theme = COMPARE_THEMES[rng.choice(sorted(COMPARE_THEMES))]
    unit = rng.choice(theme["units"])
    plan = _plan(rng, ["more", "fewer", "times", "fraction"], ["total"], n_steps)
    people = rng.sample([name for name, _ in NAMES], len(plan) + 1)
    amounts = [rng.randint(2, cfg.max_operand)]
    question, lines = [theme["start"].format(name=people[0], x=amounts[0], unit=unit)], []
    for i, kind in enumerate(plan, 1):
        if kind == "total":
            if sum(amounts) > cfg.max_result:
                return None
            expr = "+".join(map(str, amounts))
            total = sum(amounts)
            question.append(theme["total"][0].format(unit=unit))
            lines.append(theme["total"][1].format(calc=f"{expr}=<<{expr}={total}>>{total}", unit=unit))
            return _problem(question, lines, total)
        x = amounts[-1]
        operands = _operands(rng, cfg, kind, x)
        if operands is None:
            return None
        (b,) = operands
        k = TIMES_WORDS.get(b) if kind == "times" else FRACTION_WORDS.get(b)
        step, y = calc(x, {"more": "+", "fewer": "-", "times": "*", "fraction": "/"}[kind], b)
        question.append(theme[kind].format(name=people[i], prev=people[i - 1], b=b, k=k, unit=unit))
        lines.append(theme["step"].format(name=people[i], calc=step, unit=unit))
        amounts.append(y)
    question.append(theme["question"].format(name=people[-1], unit=unit))
    return _problem(question, lines, amounts[-1])


def _problem(question: list[str], lines: list[str], answer: int) -> dict[str, str]:
    return {"question": " ".join(question), "answer": "\n".join(lines + [f"#### {answer}"])}


def sample_problem(rng: random.Random, cfg: MathGenConfig) -> dict[str, str]:
    """One problem with min_steps..max_steps steps; stories whose numbers would break the bounds are redrawn."""
    while True:
        n_steps = rng.randint(cfg.min_steps, cfg.max_steps)
        story = _event_story if rng.random() < 0.5 else _compare_story
        problem = story(rng, cfg, n_steps)
        if problem is not None:
            return problem


def generate_problems(cfg: MathGenConfig) -> dict[str, list[dict[str, str]]]:
    """Disjoint (by question text) splits "pretrain", "rl" and "test", deterministic for `cfg`.

    The test split is drawn first, so it depends only on the seed, the difficulty knobs and n_test.
    """
    rng = random.Random(cfg.seed)
    sizes = {"test": cfg.n_test, "rl": cfg.n_rl, "pretrain": cfg.n_pretrain}
    seen: set[str] = set()
    repeats = 0  # draws that gave an already seen question: once they outnumber new ones, the knobs allow too few
    splits: dict[str, list[dict[str, str]]] = {}
    for split, size in sizes.items():
        rows: list[dict[str, str]] = []
        while len(rows) < size:
            problem = sample_problem(rng, cfg)
            if problem["question"] in seen:
                repeats += 1
                check(
                    repeats < 1000 + len(seen),
                    section_path("data.math.generator"),
                    f"found only {len(seen)} distinct problems; raise max_operand, max_result or max_steps, "
                    f"or ask for fewer problems",
                )
                continue
            seen.add(problem["question"])
            rows.append(problem)
        splits[split] = rows
    return {name: splits[name] for name in ("pretrain", "rl", "test")}


# --------------------------------------------------------------------------------------------------------------------
# Text formats
# --------------------------------------------------------------------------------------------------------------------


def format_prompt(question: str) -> str:
    """The prompt of a question: the model continues with a worked solution."""
    return f"Question: {question}\nAnswer:"


def format_example(problem: dict[str, str]) -> str:
    """A pretraining text (the trainer appends EOS so the model learns to stop after "#### <number>")."""
    return f"{format_prompt(problem['question'])} {problem['answer']}"


def format_example_with_reference(problem: dict[str, str], reference: str) -> str:
    """An observer-style pretraining text: a reference solution of the same question, then the correct one."""
    return f"Question: {problem['question']}\nReference: {reference}\nAnswer: {problem['answer']}"


_ANNOTATION = re.compile(r"<<([^<>=]*)=([^<>]*)>>([\d,.]*)")


def wrong_solution(solution: str, rng: random.Random) -> str:
    """`solution` with its final answer moved by 1-3 (never below 0): a plausible wrong reference.

    The last calculator annotation that gives the final answer is changed too, so the error looks like a slip in the
    last step rather than a bare mismatch.
    """
    gold = Decimal(gsm8k_answer(solution))
    wrong = gold + rng.choice([d for d in (-3, -2, -1, 1, 2, 3) if gold + d >= 0])
    body, _, _ = solution.rpartition("####")
    last = None
    for match in _ANNOTATION.finditer(body):
        last = match
    if last is not None and canonical_number(last.group(2)) == str(gold):
        body = f"{body[: last.start()]}<<{last.group(1)}={wrong}>>{wrong}{body[last.end():]}"
    return f"{body}#### {wrong}"


def sample_reference(problem: dict[str, str], rng: random.Random, wrong_fraction: float) -> str:
    """A reference answer for the observer format: the solution itself, or with probability wrong_fraction a wrong one."""
    return wrong_solution(problem["answer"], rng) if rng.random() < wrong_fraction else problem["answer"]


def pretraining_texts(
    problems: list[dict[str, str]],
    reference_fraction: float = 0.3,
    wrong_fraction: float = 0.5,
    seed: int = 0,
    slip_rate: float = 0.0,
) -> list[str]:
    """Every problem as a plain example, plus for a `reference_fraction` share an observer-style example too.

    With `slip_rate` > 0, that share of the worked solutions (drawn per example, plain and observer alike) slips in its
    final step (`wrong_solution`: answer moved by 1-3), as worked solutions written by people now and then do. A model
    trained on them is usually right but not sure of it: it samples the slip at about that rate, which a correctness
    reward can train away (the RL problems and the test set are never slipped). Slips draw from their own random
    stream, so slip_rate 0 gives exactly the texts of a corpus without them.
    """
    check(0.0 <= reference_fraction <= 1.0, "reference_fraction", f"must be in [0, 1], got {reference_fraction}")
    check(0.0 <= wrong_fraction <= 1.0, "wrong_fraction", f"must be in [0, 1], got {wrong_fraction}")
    check(0.0 <= slip_rate < 1.0, "slip_rate", f"must be in [0, 1), got {slip_rate}")
    rng, slips = random.Random(seed), random.Random(f"slip{seed}")

    def shown(problem: dict[str, str]) -> dict[str, str]:
        if slip_rate and slips.random() < slip_rate:
            return {**problem, "answer": wrong_solution(problem["answer"], slips)}
        return problem

    texts = []
    for problem in problems:
        texts.append(format_example(shown(problem)))
        if rng.random() < reference_fraction:
            reference = sample_reference(problem, rng, wrong_fraction)
            texts.append(format_example_with_reference(shown(problem), reference))
    return texts


