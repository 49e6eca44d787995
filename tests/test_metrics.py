import csv
import json
import re

import pytest

from cory.report.markdown import glossary_markdown
from cory.rl.metrics import GLOSSARY, MetricsWriter, describe, distinct_n

AGENT_KEYS = [
    "task_reward", "kl", "combined_reward", "training_score", "kl_coef", "kl_penalty", "policy_loss", "value_loss",
    "policy_clipfrac", "value_clipfrac", "approx_kl", "entropy", "response_length", "distinct_1", "distinct_2",
    "skipped_minibatches", "skipped_steps", "dropped_samples",
]  # fmt: skip


def test_glossary_covers_every_key_pattern():
    expected = {"iteration", "swap", "timing/generation", "timing/scoring", "timing/update", "timing/iteration"}
    for prefix in ("llm1", "llm2", "pioneer", "observer"):
        expected |= {f"{prefix}/{name}" for name in AGENT_KEYS}
    expected |= {"llm1/role", "llm2/role", "llm1/probe_task_reward", "llm2/probe_task_reward"}
    assert set(GLOSSARY) == expected
    assert all(text.strip() for text in GLOSSARY.values())


def test_describe_resolves_prefixed_keys_and_rejects_unknown_ones():
    text = describe("llm2/kl")
    assert "LLM2" in text and "KL(pi_theta || pi_ref)" in text and "exact" in text
    assert "pioneer" in describe("pioneer/task_reward")
    with pytest.raises(KeyError, match="pioneer/role"):
        describe("pioneer/role")  # roles are per identity only


def test_glossary_markdown_lists_every_metric_name():
    text = glossary_markdown()
    assert text.startswith("# Metrics glossary")
    for name in AGENT_KEYS + ["role", "timing/iteration", "swap", "pass@k"]:
        assert f"{name}` |" in text
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert all(len(re.findall(r"(?<!\\)\|", row)) == 3 for row in rows)  # two cells: "||" in KL(p || q) is escaped


def test_distinct_n_on_literal_strings():
    texts = ["the cat sat", "the cat ran"]
    assert distinct_n(texts, 1) == pytest.approx(4 / 6)  # the, cat, sat, ran out of 6 words
    assert distinct_n(texts, 2) == pytest.approx(3 / 4)  # (the cat) twice, (cat sat), (cat ran)
    assert distinct_n(["good good good good"], 1) == pytest.approx(1 / 4)
    assert distinct_n(["one", ""], 2) == 0.0  # no bigram at all
    assert distinct_n(["abab"], 2, tokenizer=list) == pytest.approx(2 / 3)  # ab, ba, ab
    with pytest.raises(ValueError):
        distinct_n(texts, 0)


def read_history(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_writer_round_trip(tmp_path):
    writer = MetricsWriter(tmp_path / "run")
    rows = [
        {"llm1/kl": 0.5, "llm1/task_reward": 1.25, "swap": 0, "timing/iteration": 2.0},
        {"llm1/kl": 1.5, "llm1/task_reward": -0.75, "swap": 1},  # timing absent -> empty cell
        {"timing/iteration": 4.0, "llm1/task_reward": 0.5, "llm1/kl": 2.5, "swap": 0},  # order does not matter
    ]
    for step, row in enumerate(rows):
        writer.log(step, row)

    history = read_history(tmp_path / "run" / "history.csv")
    assert list(history[0]) == ["iteration", "swap", "timing/iteration", "llm1/task_reward", "llm1/kl"]
    for step, (written, row) in enumerate(zip(history, rows)):
        assert int(written["iteration"]) == step
        for key in history[0]:
            if key == "iteration":
                continue
            assert (float(written[key]) if written[key] else None) == row.get(key)

    summary = writer.summary(last_n=2, seed=3)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk == summary
    assert summary["final"]["llm1/kl"] == pytest.approx(2.0)
    assert summary["final"]["llm1/task_reward"] == pytest.approx(-0.125)
    assert summary["final"]["timing/iteration"] == pytest.approx(4.0)  # only the row that has it
    assert summary["iterations"] == 3 and summary["last_n"] == 2 and summary["seed"] == 3
    assert "iteration" not in summary["final"]

    writer.samples([{"query": "q", "response": "r", "score": 1.0}])
    lines = (tmp_path / "run" / "samples.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"query": "q", "response": "r", "score": 1.0}]


def test_summary_turns_nan_into_null(tmp_path):
    writer = MetricsWriter(tmp_path)
    writer.log(0, {"llm1/approx_kl": float("nan")})
    writer.summary(last_n=1)
    assert json.loads((tmp_path / "summary.json").read_text())["final"] == {"llm1/approx_kl": None}


def test_writer_rejects_keys_not_in_glossary(tmp_path):
    writer = MetricsWriter(tmp_path)
    with pytest.raises(KeyError, match="llm1/reward"):
        writer.log(0, {"llm1/kl": 1.0, "llm1/reward": 2.0})
    assert not (tmp_path / "history.csv").exists()


def test_writer_rejects_a_column_added_after_the_first_row(tmp_path):
    writer = MetricsWriter(tmp_path)
    writer.log(0, {"llm1/kl": 1.0})
    with pytest.raises(ValueError, match="llm2/kl"):
        writer.log(1, {"llm1/kl": 1.0, "llm2/kl": 2.0})
    with pytest.raises(ValueError, match="iteration"):
        writer.log(2, {"iteration": 5, "llm1/kl": 1.0})
    assert len(read_history(tmp_path / "history.csv")) == 1
