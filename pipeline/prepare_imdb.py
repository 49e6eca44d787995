"""DVC stage prepare_imdb: IMDB reviews as outputs/<profile>/data/imdb/{train,validation,prompts}.jsonl + stats.json.

train/validation rows are {"text", "label"} (label 1 = positive, `<br />` cleaned); the validation reviews score the
base LMs' perplexity and the reward model's accuracy. prompts.jsonl holds the RL queries, built from the train split
only: {"query" (the first 2-8 tokens of a review), "review_id" (its row in train.jsonl), "query_tokens", "label"}.
"""

from __future__ import annotations

from collections import Counter
from statistics import mean

from cory.schema import to_dict
from cory.tasks.config import IMDBDataConfig
from cory.tasks.imdb import build_prompts, load_imdb, split_imdb
from cory.tasks.tokenizer import load_tokenizer
from pipeline.common import require_device, run_stage, stage_timer, write_json, write_jsonl
from pipeline.params import load_params
from pipeline.paths import out_dir
from pipeline.single_writer import stage_lock


def prepare_imdb(cfg: IMDBDataConfig) -> tuple[dict[str, list[dict]], dict]:
    """The three row lists ("train", "validation", "prompts") and their stats."""
    tokenizer = load_tokenizer(cfg.tokenizer, "data.imdb.tokenizer")
    train, validation = split_imdb(load_imdb(cfg), cfg)
    prompts = build_prompts(train, tokenizer, cfg, cfg.prompt_seed)
    splits = {"train": train.to_list(), "validation": validation.to_list(), "prompts": prompts}
    stats = {
        "source": cfg.source,
        **{
            name: {
                "reviews": len(rows),
                "positive_fraction": mean(row["label"] for row in rows),
                "mean_chars": mean(len(row["text"]) for row in rows),
            }
            for name, rows in (("train", splits["train"]), ("validation", splits["validation"]))
        },
        "prompts": {
            "count": len(prompts),
            "positive_fraction": mean(row["label"] for row in prompts) if prompts else 0.0,
            "query_tokens": {str(k): n for k, n in sorted(Counter(row["query_tokens"] for row in prompts).items())},
        },
        "config": to_dict(cfg),
    }
    return splits, stats


def main() -> None:
    params = load_params()
    require_device(params, computes=False)
    with stage_lock(params, "prepare_imdb"), stage_timer(params, "prepare_imdb"):  # one writer (pipeline.single_writer)
        cfg = params.data.imdb
        splits, stats = prepare_imdb(cfg)
        out = out_dir(params, "data", "imdb")
        for name, rows in splits.items():
            write_jsonl(out / f"{name}.jsonl", rows)
        write_json(out / "stats.json", stats)
        print(f"prepare_imdb: {', '.join(f'{len(rows)} {name}' for name, rows in splits.items())} rows in {out}")


if __name__ == "__main__":
    run_stage(main)
