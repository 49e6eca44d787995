"""DVC stage reward_model: the IMDB sentiment classifier whose POSITIVE logit is the RL reward (CORY.md §2.1).

The paper scores with `lvwerra/distilbert-imdb`; offline there is none (shared/OFFLINE.md), so by default a GPT-2
sequence classifier is trained here on the train reviews, started from the imdb_small LM's body. A `source` other
than "scratch" (the paper profile's "lvwerra/distilbert-imdb", or a folder) is only evaluated and saved.

Writes outputs/<profile>/models/reward/ (model + tokenizer + training.json) and
outputs/<profile>/metrics/reward_model.json: held-out accuracy on full reviews (cut to classifier.max_length tokens)
and on their first classifier.eval_prefix_tokens tokens, the length of the texts the reward actually scores.
"""

from __future__ import annotations

import time

import transformers

from cory.config import to_dict
from cory.classifier import classifier_accuracy, train_reward_classifier
from cory.pretrain import count_parameters, load_pretrained, save_model
from cory.tokenizer import load_tokenizer
from cory.tracking import provenance, start_run
from pipeline.common import (
    device, load_params, out_dir, profile, read_jsonl, require_device, run_stage, section, stage_timer, write_json,
)
from pipeline.params import SCRATCH, RewardModelConfig


def build_reward_model(cfg: RewardModelConfig, params: dict, device: str) -> tuple[dict, dict]:
    """Train (or load) the classifier, save it with its tokenizer; returns (metrics, training record)."""
    data = out_dir(params, "data", "imdb")
    train, validation = read_jsonl(data / "train.jsonl"), read_jsonl(data / "validation.jsonl")
    val_texts, val_labels = [row["text"] for row in validation], [row["label"] for row in validation]
    history = []
    if cfg.source == SCRATCH:
        init_dir = out_dir(params, "models", cfg.init_from) if cfg.init_from else None
        if init_dir is not None and not (init_dir / "config.json").is_file():
            raise FileNotFoundError(f"reward_model.init_from: {init_dir} holds no model (run the base_models stage: dvc repro base_models)")
        tokenizer = load_tokenizer(str(init_dir) if init_dir else cfg.tokenizer)
        model, metrics = train_reward_classifier(
            [row["text"] for row in train],
            [row["label"] for row in train],
            val_texts,
            val_labels,
            tokenizer,
            cfg.classifier,
            device,
            init_from=init_dir,
        )
        history = metrics.pop("history")
    else:
        started = time.perf_counter()
        model = load_pretrained(transformers.AutoModelForSequenceClassification.from_pretrained, cfg.source, "reward_model.source")
        tokenizer = load_pretrained(load_tokenizer, cfg.source, "reward_model.source")
        prefix = cfg.classifier.eval_prefix_tokens
        metrics = {
            "params": count_parameters(model),
            "val_reviews": len(val_texts),
            "accuracy": classifier_accuracy(model, tokenizer, val_texts, val_labels, cfg.classifier.max_length, device,
                                            truncation=cfg.classifier.truncation),
            f"accuracy_prefix{prefix}": classifier_accuracy(model, tokenizer, val_texts, val_labels, prefix, device),
            "total_seconds": time.perf_counter() - started,
        }
    model_dir = out_dir(params, "models", "reward")
    save_model(model, tokenizer, model_dir)
    record = {
        "source": cfg.source,
        "config": to_dict(cfg),
        "history": history,
        **provenance(device),
    }
    write_json(model_dir / "training.json", record)
    return metrics, record


def main() -> None:
    params = load_params()
    require_device(params)
    with stage_timer(params, "reward_model"):
        cfg = section(params, "reward_model", RewardModelConfig)
        with start_run("reward_model", to_dict(cfg), profile=profile(params), outputs=out_dir(params, "models", "reward")) as tracker:
            metrics, record = build_reward_model(cfg, params, device())
            for row in record["history"]:
                tracker.log_metrics({"train_loss": row["train_loss"], "accuracy": row["accuracy"]}, step=row["step"])
            tracker.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=metrics.get("steps", 0))
        write_json(out_dir(params, "metrics", "reward_model.json"), metrics)
        print(f"reward_model: {metrics}")


if __name__ == "__main__":
    run_stage(main)
