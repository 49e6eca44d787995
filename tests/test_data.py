"""IMDB loading (the offline package, local files, the hub while offline), the split, and the RL prompts."""

import datasets
import huggingface_hub
import pytest

from cory.schema import ConfigError, from_dict
from cory.tasks.config import IMDBDataConfig
from cory.files import read_jsonl
from cory.tasks.imdb import build_prompts, clean_review, load_imdb, split_imdb
from cory.runs.run import load_queries
from cory.tasks.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def gpt2():
    return load_tokenizer("offline-gpt2")


def reviews(texts, labels=None):
    return datasets.Dataset.from_dict({"text": texts, "label": labels or [i % 2 for i in range(len(texts))]})


def test_package_source_gives_cleaned_labelled_imdb_reviews():
    data = load_imdb(IMDBDataConfig(max_reviews=300, validation_size=50))
    assert len(data) == 300
    assert set(data["label"]) == {0, 1}
    texts = list(data["text"])
    assert not any("<br" in text for text in texts)
    assert sum("\n" in text for text in texts) > 50  # the line breaks became newlines
    assert load_imdb(IMDBDataConfig(max_reviews=300, validation_size=50))["text"] == data["text"]


def test_clean_review_turns_each_run_of_breaks_into_one_newline():
    assert clean_review("Great film. <br /><br />Really.<br />Go see it  <br /> <br /> ") == "Great film.\nReally.\nGo see it"
    assert clean_review("  no markup ") == "no markup"


def test_split_is_deterministic_disjoint_and_complete():
    data = reviews([f"review {i}" for i in range(40)])
    cfg = IMDBDataConfig(validation_size=10, split_seed=3)
    train, validation = split_imdb(data, cfg)
    again_train, again_validation = split_imdb(data, cfg)
    assert list(train["text"]) == list(again_train["text"])
    assert list(validation["text"]) == list(again_validation["text"])
    assert len(validation) == 10 and len(train) == 30
    assert set(train["text"]) | set(validation["text"]) == set(data["text"])
    assert not set(train["text"]) & set(validation["text"])
    other = split_imdb(data, IMDBDataConfig(validation_size=10, split_seed=4))[1]
    assert list(other["text"]) != list(validation["text"])


def test_split_needs_training_reviews():
    with pytest.raises(ConfigError, match="validation_size"):
        split_imdb(reviews(["a", "b"]), IMDBDataConfig(validation_size=2))


def test_prompts_are_the_first_k_tokens_with_k_in_the_inclusive_range(gpt2):
    long_texts = [f"Review number {i} says that this movie was a long and winding experience for everyone." for i in range(60)]
    cfg = IMDBDataConfig(query_tokens=(2, 4), min_review_chars=20)
    prompts = build_prompts(reviews(long_texts), gpt2, cfg, seed=0)
    assert len(prompts) == 60
    assert {row["query_tokens"] for row in prompts} == {2, 3, 4}  # both ends of the range are drawn
    for row in prompts:
        ids = gpt2(long_texts[row["review_id"]])["input_ids"]
        assert row["query"] == gpt2.decode(ids[: row["query_tokens"]])
    assert build_prompts(reviews(long_texts), gpt2, cfg, seed=0) == prompts
    assert build_prompts(reviews(long_texts), gpt2, cfg, seed=1) != prompts


def test_prompt_filter_and_cap(gpt2):
    texts = ["x" * 50, "y" * 100, "z" * 101, "w" * 300]
    data = reviews(texts)
    ids = {row["review_id"] for row in build_prompts(data, gpt2, IMDBDataConfig(min_review_chars=100), seed=0)}
    assert ids == {2, 3}  # strictly longer than min_review_chars
    full = {r["review_id"]: r for r in build_prompts(data, gpt2, IMDBDataConfig(min_review_chars=0), seed=0)}
    capped = build_prompts(data, gpt2, IMDBDataConfig(min_review_chars=0, max_rl_prompts=2), seed=0)
    assert len(capped) == 2
    assert all(row == full[row["review_id"]] for row in capped)  # the cap picks rows, never changes them


def test_local_csv_and_jsonl_sources(tmp_path):
    csv = tmp_path / "reviews.csv"
    csv.write_text('text,label\n"Loved it.<br /><br />Yes",1\nHated it,0\n')
    data = load_imdb(IMDBDataConfig(source=str(csv)))
    assert list(data["text"]) == ["Loved it.\nYes", "Hated it"] and list(data["label"]) == [1, 0]
    jsonl = tmp_path / "reviews.jsonl"
    jsonl.write_text('{"text": "Fine", "label": 1, "extra": 3}\n')
    assert list(load_imdb(IMDBDataConfig(source=str(jsonl)))["text"]) == ["Fine"]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("missing.csv", None, "missing.csv: no such file"),
        ("nolabel.csv", "text,stars\nGood,5\n", "missing column\\(s\\) label"),
        ("badlabel.csv", "text,label\nGood,1\nMeh,2\n", "row 1 has label 2"),
        ("notext.csv", "text,label\nGood,1\n,0\n", "row 1 has no text"),
        ("broken.jsonl", '{"text": "a", "label": 1}\n{not json\n', "broken.jsonl:2: not valid JSON"),
        ("empty.csv", "text,label\n", "has no rows"),
    ],
)
def test_bad_local_files_name_the_file_and_the_problem(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=f"data.imdb.source: .*{message}"):
        load_imdb(IMDBDataConfig(source=str(path)))


def test_local_source_must_be_csv_or_jsonl(tmp_path):
    path = tmp_path / "reviews.txt"
    path.write_text("Good\n")
    with pytest.raises(ConfigError, match="must be a .csv or .jsonl file"):
        load_imdb(IMDBDataConfig(source=str(path)))


def test_hub_name_while_offline_says_the_hub_is_unreachable(monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match="hub is unreachable.*'package'"):
        load_imdb(IMDBDataConfig(source="stanfordnlp/imdb"))


def test_config_errors_name_the_setting():
    with pytest.raises(ConfigError, match=r"data.imdb.query_tokens: need 1 <= min <= max"):
        from_dict(IMDBDataConfig, {"query_tokens": [8, 2]}, "data.imdb")
    with pytest.raises(ConfigError, match=r"data.imdb.max_reviews: must exceed validation_size"):
        from_dict(IMDBDataConfig, {"max_reviews": 100, "validation_size": 100}, "data.imdb")
    with pytest.raises(ConfigError, match=r"data.imdb.min_review_char: unknown setting; did you mean 'min_review_chars'"):
        from_dict(IMDBDataConfig, {"min_review_char": 100}, "data.imdb")


def test_prepare_imdb_stage_rows_and_stats(tmp_path):
    from pipeline.prepare_imdb import prepare_imdb

    path = tmp_path / "reviews.jsonl"
    rows = [f'{{"text": "Review {i}: a film that runs well past the length filter.<br />Truly.", "label": {i % 2}}}' for i in range(30)]
    path.write_text("\n".join(rows) + "\n")
    splits, stats = prepare_imdb(IMDBDataConfig(source=str(path), validation_size=6, max_rl_prompts=10, min_review_chars=20))
    assert [len(splits[name]) for name in ("train", "validation", "prompts")] == [24, 6, 10]
    assert set(splits["train"][0]) == {"text", "label"} and "<br" not in splits["train"][0]["text"]
    train_texts = [row["text"] for row in splits["train"]]
    assert all(train_texts[row["review_id"]].startswith(row["query"]) for row in splits["prompts"])
    assert stats["prompts"]["count"] == 10 and sum(stats["prompts"]["query_tokens"].values()) == 10
    assert stats["validation"]["reviews"] == 6


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"query": "a"}', '{"query": "b', '{"query": "c"}'], r"prompts\.jsonl:2: not valid JSON \(Unterminated string"),
        (['{"query": "a"}', "", '["b"]'], r"prompts\.jsonl:3: expected a JSON object, got list"),
    ],
)
def test_a_corrupt_jsonl_line_is_named_by_file_and_line(tmp_path, lines, message):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=message):
        read_jsonl(path)
    with pytest.raises(ValueError, match=message):
        load_queries(path)


def test_rl_prompts_with_and_without_answers(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"query": "Great"}\n\n{"query": "Bad", "label": 0}\n')
    assert load_queries(path) == (["Great", "Bad"], None)
    path.write_text('{"question": "1+1?", "answer": "2 #### 2"}\n{"question": "2+2?", "answer": "#### 4"}\n')
    assert load_queries(path) == (["1+1?", "2+2?"], ["2", "4"])


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"query": "a"}', '{"text": "b"}'], r"prompts\.jsonl:2: needs a string 'query' \(or 'question'\) field, got fields \['text'\]"),
        (['{"question": "q", "answer": "#### 1"}', '{"question": "r"}'], r"prompts\.jsonl:2: needs a string 'answer' field"),
        (['{"question": "q", "answer": "#### 1"}', '{"question": "r", "answer": "2"}'],
         r'prompts\.jsonl:2: GSM8K solution has no "#### <number>"'),
        ([], r"prompts\.jsonl: no prompts"),
    ],
)
def test_rl_prompt_rows_missing_a_field_are_named_by_file_and_line(tmp_path, lines, message):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(ValueError, match=message):
        load_queries(path)
