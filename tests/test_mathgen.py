"""The grade-school math generator: right arithmetic, GSM8K format, disjoint deterministic splits, observer examples."""

from __future__ import annotations

import random
import re
from fractions import Fraction
from pathlib import Path

import pytest

from cory.schema import ConfigError, from_dict
from cory.tasks.config import MathDataConfig, MathGenConfig
from cory.tasks.mathgen import (
    format_example,
    format_example_with_reference,
    format_prompt,
    generate_problems,
    pretraining_texts,
    sample_reference,
    wrong_solution,
)
from cory.tasks.rewards import MathReward, gsm8k_answer

ANNOTATION = re.compile(r"<<([^<>=]+)=([^<>]+)>>(\S+)")
EXPRESSION = re.compile(r"\d+(?:[-+*/]\d+)+")


def evaluate(expr: str) -> Fraction:
    """An annotation's expression, left to right with * and / first (all our expressions are one kind or a sum)."""
    value, pending_op = Fraction(0), "+"
    for token in re.findall(r"\d+|[-+*/]", expr):
        if token.isdigit():
            term = Fraction(int(token))
            if pending_op in "*/":
                value = value * term if pending_op == "*" else value / term
            else:
                value = value + term if pending_op == "+" else value - term
        else:
            pending_op = token
    return value


@pytest.fixture(scope="module")
def problems():
    cfg = MathGenConfig(n_pretrain=1400, n_rl=300, n_test=300, min_steps=2, max_steps=4, seed=3)
    return cfg, generate_problems(cfg)


def test_splits_have_the_asked_sizes_and_are_disjoint(problems):
    cfg, splits = problems
    assert {name: len(rows) for name, rows in splits.items()} == {"pretrain": 1400, "rl": 300, "test": 300}
    questions = [{row["question"] for row in rows} for rows in splits.values()]
    assert sum(map(len, questions)) == 2000  # no duplicates inside a split either
    assert not (questions[0] & questions[1] or questions[0] & questions[2] or questions[1] & questions[2])


def test_generation_is_deterministic_and_the_test_split_depends_only_on_its_own_size(problems):
    cfg, splits = problems
    assert generate_problems(cfg) == splits
    other = generate_problems(MathGenConfig(**{**vars(cfg), "n_pretrain": 10, "n_rl": 5}))
    assert other["test"] == splits["test"]
    assert generate_problems(MathGenConfig(**{**vars(cfg), "seed": 4}))["test"] != splits["test"]


def test_every_annotation_is_right_and_every_solution_scores_one(problems):
    cfg, splits = problems
    rows = [row for rows in splits.values() for row in rows]
    for row in rows:
        *steps, final = row["answer"].split("\n")
        assert re.fullmatch(r"#### \d+", final), row["answer"]
        assert cfg.min_steps <= len(steps) <= cfg.max_steps
        previous_value = None
        for step in steps:
            (expr, value, shown), *more = ANNOTATION.findall(step)
            assert not more, step
            assert EXPRESSION.fullmatch(expr) and step.endswith(".")
            assert evaluate(expr) == int(value) == int(shown.rstrip(".")), step
            assert 0 <= int(value) <= cfg.max_result
            previous_value = value
        assert final == f"#### {previous_value}"
        assert all(int(n) <= cfg.max_operand for n in re.findall(r"\d+", row["question"]))
    scores = MathReward()([r["question"] for r in rows], [r["answer"] for r in rows], [r["answer"] for r in rows])
    assert scores.sum().item() == len(rows)


def test_problems_vary():
    rows = generate_problems(MathGenConfig(n_pretrain=0, n_rl=0, n_test=400))["test"]
    firsts = {row["question"].split(" ")[1] for row in rows}  # "has", "is", "bakes", "walks"
    assert {"has", "is", "bakes", "walks"} <= firsts
    ops = "".join(re.findall(r"<<\d+([-+*/])", "".join(row["answer"] for row in rows)))
    assert set(ops) == set("+-*/")


def test_difficulty_knobs_bound_the_numbers():
    cfg = MathGenConfig(n_pretrain=0, n_rl=0, n_test=300, min_steps=3, max_steps=3, max_operand=6, max_result=12)
    for row in generate_problems(cfg)["test"]:
        assert row["answer"].count("<<") == 3
        assert all(int(n) <= 12 for n in re.findall(r"\d+", row["answer"]))


def test_config_errors_name_the_setting():
    with pytest.raises(ConfigError, match=r"data\.math\.generator\.min_steps"):
        from_dict(MathDataConfig, {"generator": {"min_steps": 3, "max_steps": 2}}, "data.math")
    with pytest.raises(ConfigError, match=r"data\.math\.generator\.max_result: must be >= 2 x max_operand"):
        from_dict(MathDataConfig, {"generator": {"max_operand": 50, "max_result": 60}}, "data.math")
    with pytest.raises(ConfigError, match=r"data\.math\.source: must be one of"):
        from_dict(MathDataConfig, {"source": "gsm9k"}, "data.math")
    with pytest.raises(ConfigError, match=r"data\.math\.n_rl"):
        from_dict(MathDataConfig, {"n_rl": 0}, "data.math")
    with pytest.raises(ConfigError, match="found only .* distinct problems"):
        generate_problems(MathGenConfig(n_test=100000, min_steps=1, max_steps=1, max_operand=5, max_result=10))


def test_text_formats():
    problem = {"question": "Mia has 2 pens. She finds 3 more pens. How many pens does Mia have now?",
               "answer": "She finds 3 more, so she has 2+3=<<2+3=5>>5 pens.\n#### 5"}  # fmt: skip
    assert format_prompt(problem["question"]) == f"Question: {problem['question']}\nAnswer:"
    assert format_example(problem) == f"Question: {problem['question']}\nAnswer: {problem['answer']}"
    assert format_example_with_reference(problem, "REF") == (
        f"Question: {problem['question']}\nReference: REF\nAnswer: {problem['answer']}"
    )


def test_wrong_references_change_the_last_step_and_the_final_answer(problems):
    _, splits = problems
    rng = random.Random(0)
    for row in splits["test"]:
        wrong = wrong_solution(row["answer"], rng)
        gold, bad = int(gsm8k_answer(row["answer"])), int(gsm8k_answer(wrong))
        assert bad != gold and bad >= 0 and abs(bad - gold) <= 3
        assert wrong.split("\n")[:-2] == row["answer"].split("\n")[:-2]  # earlier steps untouched
        assert f"={bad}>>{bad}" in wrong.split("\n")[-2]
    rows = splits["test"]
    wrong_share = sum(sample_reference(r, rng, 0.3) != r["answer"] for r in rows) / len(rows)
    assert 0.2 < wrong_share < 0.4
    assert all(sample_reference(r, rng, 0.0) == r["answer"] for r in rows)


def test_pretraining_texts_mix_plain_and_observer_examples(problems):
    _, splits = problems
    rows = splits["pretrain"]
    texts = pretraining_texts(rows, reference_fraction=0.25, wrong_fraction=0.5, seed=1)
    with_reference = [t for t in texts if "\nReference: " in t]
    assert len(texts) - len(with_reference) == len(rows)
    assert 0.2 < len(with_reference) / len(rows) < 0.3
    assert texts == pretraining_texts(rows, reference_fraction=0.25, wrong_fraction=0.5, seed=1)
    assert pretraining_texts(rows, reference_fraction=0.0) == [format_example(r) for r in rows]


def test_slipped_pretraining_solutions_change_only_their_final_step(problems):
    _, splits = problems
    rows = splits["pretrain"]
    clean = pretraining_texts(rows, seed=1)
    assert pretraining_texts(rows, seed=1, slip_rate=0.0) == clean
    slipped = pretraining_texts(rows, seed=1, slip_rate=0.3)
    assert len(slipped) == len(clean)  # the same examples (plain and observer-style), some with a slipped answer
    changed = [(a, b) for a, b in zip(clean, slipped) if a != b]
    assert 0.2 < len(changed) / len(clean) < 0.4
    for a, b in changed:
        gold, wrong = a.rpartition("#### ")[2], b.rpartition("#### ")[2]
        assert 1 <= abs(int(gold) - int(wrong)) <= 3
        assert a.rpartition("Answer:")[0] == b.rpartition("Answer:")[0]  # question and reference untouched
        assert a.rpartition("\n")[0].rpartition("\n")[0] == b.rpartition("\n")[0].rpartition("\n")[0]  # earlier steps too
    with pytest.raises(ConfigError, match="slip_rate"):
        pretraining_texts(rows, slip_rate=1.0)


# --------------------------------------------------------------------------------------------------------------------
# Stage prepare_math (its pure functions)
# --------------------------------------------------------------------------------------------------------------------


def _write_gsm8k(folder, train_lines, test_lines=('{"question": "q", "answer": "1+1=<<1+1=2>>2\\n#### 2"}',)):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.jsonl").write_text("\n".join(train_lines) + "\n")
    (folder / "test.jsonl").write_text("\n".join(test_lines) + "\n")
    return folder


def test_prepare_math_generated_and_gsm8k(tmp_path):
    from pipeline.prepare_math import prepare_math, split_stats

    cfg = MathDataConfig(generator=MathGenConfig(n_pretrain=20, n_rl=10, n_test=5))
    splits = prepare_math(cfg, tmp_path)
    assert [len(splits[s]) for s in ("pretrain", "rl", "test")] == [20, 10, 5]
    assert split_stats(splits["rl"])["n"] == 10 and 2 <= split_stats(splits["rl"])["mean_steps"] <= 3

    row = '{"question": "Q%d", "answer": "2*%d=<<2*%d=%d>>%d\\n#### %d"}'
    _write_gsm8k(tmp_path / "gsm", [row % (i, i, i, 2 * i, 2 * i, 2 * i) for i in range(1, 6)])
    cfg = MathDataConfig(source="gsm8k", gsm8k_path="gsm", n_pretrain=2, n_rl=4)
    splits = prepare_math(cfg, tmp_path)
    assert [r["question"] for r in splits["pretrain"]] == ["Q1", "Q2"]
    assert [r["question"] for r in splits["rl"]] == ["Q1", "Q2", "Q3", "Q4"]
    assert split_stats(splits["rl"]) == {"n": 4, "mean_steps": 1, "mean_question_chars": 2, "max_answer": 8.0}


def test_real_gsm8k_folder_reads_whole():
    from pipeline.prepare_math import load_gsm8k

    folder = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"
    if not folder.is_dir():
        pytest.skip(f"GSM8K not found at {folder} (the repo's sibling shared/ folder)")
    data = load_gsm8k(str(folder))
    assert (len(data["train"]), len(data["test"])) == (7473, 1319)


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"question": "q", "answer": "#### 3"}', "{not json"], r"train\.jsonl:2: not valid JSON"),
        (['{"question": "q"}'], r"train\.jsonl:1: missing or empty 'answer'"),
        (['{"question": "q", "answer": "3"}'], r'train\.jsonl:1: GSM8K solution has no "#### <number>"'),
        (["[1, 2]"], r"train\.jsonl:1: expected a JSON object"),
    ],
)
def test_gsm8k_file_errors_name_file_and_line(tmp_path, lines, message):
    from pipeline.prepare_math import load_gsm8k

    _write_gsm8k(tmp_path / "gsm", lines)
    with pytest.raises(ValueError, match=message):
        load_gsm8k("gsm", tmp_path)


def test_gsm8k_missing_files_and_offline_hub(tmp_path, monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    from pipeline.prepare_math import load_gsm8k

    (tmp_path / "gsm").mkdir()
    (tmp_path / "gsm" / "train.jsonl").write_text('{"question": "q", "answer": "#### 3"}\n')
    with pytest.raises(FileNotFoundError, match=r"test\.jsonl: GSM8K file not found"):
        load_gsm8k("gsm", tmp_path)
    with pytest.raises(FileNotFoundError, match="data.math.gsm8k_path: no folder"):
        load_gsm8k("no/such/folder", tmp_path)
    # fail at once, as HF_HUB_OFFLINE=1 does, instead of retrying for ~25 s without a network; one line (ConfigError)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match="hub is unreachable.*set data.math.gsm8k_path to a folder"):
        load_gsm8k("openai/gsm8k", tmp_path)
