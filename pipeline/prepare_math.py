"""DVC stage prepare_math: the math problems as outputs/<profile>/data/math/{pretrain,rl,test}.jsonl + stats.json.

Rows are {"question", "answer"} with GSM8K worked solutions. `data.math.source` picks where they come from:
- generated: `cory.tasks.mathgen` problems (disjoint splits), the offline stand-in for small from-scratch models;
- gsm8k: GSM8K itself from a local folder (train.jsonl, test.jsonl) or the hub; pretrain = the first n_pretrain
  train rows, rl = the first n_rl train rows, test = the first n_test test rows.

Local files are read line by line rather than through `datasets`, so a malformed row is reported by file and line
before anything is written; a hub name goes through `datasets.load_dataset` (users with the hub).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import mean

from cory.schema import ConfigError
from cory.tasks.config import MathDataConfig
from cory.tasks.mathgen import generate_problems
from cory.tasks.rewards import gsm8k_answer
from pipeline.common import require_device, run_stage, stage_timer, write_json, write_jsonl
from pipeline.params import load_params
from pipeline.paths import ROOT, out_dir
from pipeline.single_writer import stage_lock

SPLITS = ("pretrain", "rl", "test")
_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def check_row(row: object, where: str) -> dict[str, str]:
    """A GSM8K row as {"question", "answer"}; `where` (file:line) names it in the error."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object with question and answer, got {type(row).__name__}")
    for key in ("question", "answer"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            raise ValueError(f"{where}: missing or empty {key!r}")
    try:
        gsm8k_answer(row["answer"])
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return {"question": row["question"], "answer": row["answer"]}


def read_gsm8k_file(path: Path) -> list[dict[str, str]]:
    """The rows of one GSM8K jsonl file, each checked; errors name the file and line."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: GSM8K file not found (data.math.gsm8k_path needs train.jsonl and test.jsonl)")
    rows = []
    with open(path) as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            rows.append(check_row(row, f"{path}:{number}"))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def load_gsm8k(name_or_path: str, root: Path = ROOT) -> dict[str, list[dict[str, str]]]:
    """GSM8K's "train" and "test" rows from a local folder (relative to `root`) or a hub data set name."""
    folder = Path(name_or_path) if Path(name_or_path).is_absolute() else root / name_or_path
    if folder.is_dir():
        return {split: read_gsm8k_file(folder / f"{split}.jsonl") for split in ("train", "test")}
    if not _HUB_NAME.fullmatch(name_or_path):
        raise FileNotFoundError(f"data.math.gsm8k_path: no folder {folder}")
    from cory.hf import offline_unless_reachable

    offline_unless_reachable()  # before datasets reads $HF_HUB_OFFLINE: offline, its cache or one quick error
    from datasets import load_dataset

    try:
        data = load_dataset(name_or_path, "main")
    except Exception as exc:  # datasets raises ConnectionError, FileNotFoundError, ... depending on what failed
        raise ConfigError(
            f"data.math.gsm8k_path: {name_or_path!r} is not a local folder, and loading it from the Hugging Face hub "
            f"failed (the hub is unreachable: {type(exc).__name__}). Offline, set data.math.gsm8k_path to a folder "
            f"with GSM8K's train.jsonl and test.jsonl (e.g. ../shared/data/gsm8k)."
        ) from None
    return {
        split: [check_row(row, f"{name_or_path}[{split}] row {i}") for i, row in enumerate(data[split])]
        for split in ("train", "test")
    }


def prepare_math(cfg: MathDataConfig, root: Path = ROOT) -> dict[str, list[dict[str, str]]]:
    """The "pretrain", "rl" and "test" splits the config asks for."""
    if cfg.source == "generated":
        return generate_problems(cfg.generator)
    gsm8k = load_gsm8k(cfg.gsm8k_path, root)
    return {
        "pretrain": gsm8k["train"][: cfg.n_pretrain],
        "rl": gsm8k["train"][: cfg.n_rl],
        "test": gsm8k["test"][: cfg.n_test],
    }


def split_stats(rows: list[dict[str, str]]) -> dict[str, float]:
    """Size, mean number of annotated steps, mean question length (characters) and largest final answer."""
    if not rows:
        return {"n": 0}
    return {
        "n": len(rows),
        "mean_steps": mean(row["answer"].count("<<") for row in rows),
        "mean_question_chars": mean(len(row["question"]) for row in rows),
        "max_answer": max(float(gsm8k_answer(row["answer"])) for row in rows),
    }


def main() -> None:
    params = load_params()
    require_device(params, computes=False)
    with stage_lock(params, "prepare_math"), stage_timer(params, "prepare_math"):  # one writer (pipeline.single_writer)
        cfg = params.data.math
        splits = prepare_math(cfg)
        out = out_dir(params, "data", "math")
        for name in SPLITS:
            write_jsonl(out / f"{name}.jsonl", splits[name])
        write_json(out / "stats.json", {"source": cfg.source, **{name: split_stats(splits[name]) for name in SPLITS}})
        print(f"prepare_math: {', '.join(f'{len(splits[n])} {n}' for n in SPLITS)} problems ({cfg.source}) in {out}")


if __name__ == "__main__":
    run_stage(main)
