"""DVC stage base_model@<name>: one base language model, outputs/<profile>/models/<name>/ (model + tokenizer).

`python -m pipeline.base_models <name>` reads params `base_models.<name>`. The default profile names three:
- imdb_small: the GPT2-Large stand-in that PPO and both CORY agents start from;
- imdb_large: the GPT2-XL stand-in of the model-size ablation, about twice imdb_small's parameters (as many as the
  two CORY copies together; `compare_params_with: imdb_small` writes the ratio to its metrics);
- math: the GSM8K-task model, pretrained on data/math/pretrain.jsonl in `cory.mathgen`'s "Question: ... Answer:" format.
A `source` other than "scratch" (a hub name such as gpt2-large, or a local folder) is saved as it is, not trained.

Writes, besides the model folder (which also gets training.json: loss history, config, versions, commit):
outputs/<profile>/metrics/base_models/<name>.json (parameters, validation perplexity, speed) and
outputs/<profile>/samples/base_models/<name>.json (sampled continuations, to read what the model writes).
"""

from __future__ import annotations

import random
import sys

import torch
import transformers

from cory.config import ConfigError, to_dict
from cory.pretrain import (
    build_causal_lm,
    count_parameters,
    load_pretrained,
    pretrain_lm,
    sample_texts,
    save_model,
)
from cory.roles import TABLE3_QUERIES
from cory.tokenizer import CORPUS_VOCABULARY, corpus_vocabulary, load_tokenizer
from cory.tracking import provenance, start_run
from pipeline.common import (
    device, load_params, out_dir, profile, read_jsonl, require_device, run_stage, section, stage_timer, write_json,
)
from pipeline.params import SCRATCH, BaseModelConfig


def corpus_texts(name: str, cfg: BaseModelConfig, params: dict) -> tuple[list[str], list[str], list[str]]:
    """(train texts, validation texts, sample prompts) of the model's corpus, read from the data stages' files."""
    if cfg.corpus == "imdb":
        data = out_dir(params, "data", "imdb")
        train = [row["text"] for row in read_jsonl(data / "train.jsonl")]
        validation = [row["text"] for row in read_jsonl(data / "validation.jsonl")]
        prompts = list(TABLE3_QUERIES) + [" ".join(text.split()[:4]) for text in validation]
        return train, validation, prompts[: cfg.samples]
    from cory.mathgen import format_example, format_prompt, pretraining_texts

    problems = read_jsonl(out_dir(params, "data", "math", "pretrain.jsonl"))
    if cfg.holdout >= len(problems):
        raise ConfigError(f"base_models.{name}.holdout: {cfg.holdout} leaves none of {len(problems)} problems to train")
    random.Random(cfg.pretrain.seed).shuffle(problems)
    held_out, kept = problems[: cfg.holdout], problems[cfg.holdout :]
    # mathgen's mix of plain and observer-style ("Reference: ...") examples, so the observer's prompt is familiar
    train = pretraining_texts(kept, seed=cfg.pretrain.seed, slip_rate=cfg.slip_rate)
    validation = [format_example(problem) for problem in held_out]
    return train, validation, [format_prompt(problem["question"]) for problem in held_out[: cfg.samples]]


def scratch_tokenizer(cfg: BaseModelConfig, train: list[str]):
    """The tokenizer of a model trained from scratch on `train`: `cfg.tokenizer`, or GPT-2's cut down to `train`'s
    tokens (`offline-gpt2:corpus`)."""
    return corpus_vocabulary(train) if cfg.tokenizer == CORPUS_VOCABULARY else load_tokenizer(cfg.tokenizer)


def parameter_count(name: str, params: dict) -> int:
    """Parameters of base model `name` as its params describe it, built on the meta device (no memory, no training)."""
    cfg = section(params, f"base_models.{name}", BaseModelConfig)
    if cfg.source == SCRATCH:
        texts = corpus_texts(name, cfg, params)[0] if cfg.tokenizer == CORPUS_VOCABULARY else []
        tokenizer = scratch_tokenizer(cfg, texts)
        with torch.device("meta"):
            return count_parameters(build_causal_lm(cfg.lm, len(tokenizer), tokenizer.eos_token_id))
    config = load_pretrained(transformers.AutoConfig.from_pretrained, cfg.source, f"base_models.{name}.source")
    with torch.device("meta"):
        return count_parameters(transformers.AutoModelForCausalLM.from_config(config))


def build_base_model(name: str, cfg: BaseModelConfig, params: dict, device: str) -> tuple[dict, dict, list[dict]]:
    """Train (or load) model `name` and save it with its tokenizer; returns (metrics, training record, samples)."""
    train, validation, prompts = corpus_texts(name, cfg, params)  # missing data files fail here, before model work
    reference_params = parameter_count(cfg.compare_params_with, params) if cfg.compare_params_with else None
    if cfg.source == SCRATCH:
        tokenizer = scratch_tokenizer(cfg, train)
        torch.manual_seed(cfg.pretrain.seed)
        model = build_causal_lm(cfg.lm, len(tokenizer), tokenizer.eos_token_id)
        result = pretrain_lm(model, tokenizer, train, validation, cfg.pretrain, device)
    else:
        setting = f"base_models.{name}.source"
        model = load_pretrained(transformers.AutoModelForCausalLM.from_pretrained, cfg.source, setting)
        tokenizer = load_pretrained(load_tokenizer, cfg.source, setting)
        result = {"params": count_parameters(model)}
    model_dir = out_dir(params, "models", name)
    save_model(model, tokenizer, model_dir)

    history = result.pop("history", [])
    metrics = dict(result)
    if reference_params is not None:
        metrics["param_ratio"] = metrics["params"] / reference_params
    record = {
        "name": name,
        "source": cfg.source,
        "config": to_dict(cfg),
        "history": history,
        **provenance(device),
    }
    write_json(model_dir / "training.json", record)
    continuations = sample_texts(model, tokenizer, prompts, cfg.sample_tokens, device, cfg.pretrain.seed) if prompts else []
    samples = [{"prompt": p, "continuation": c} for p, c in zip(prompts, continuations)]
    return metrics, record, samples


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    params = load_params()
    require_device(params)
    names = list(params.get("base_models") or {})
    if len(argv) != 1 or argv[0] not in names:
        raise SystemExit(f"usage: python -m pipeline.base_models NAME, with NAME one of base_models: {', '.join(names)}")
    name = argv[0]
    with stage_timer(params, f"base_model@{name}"):
        cfg = section(params, f"base_models.{name}", BaseModelConfig)
        with start_run(f"base_model@{name}", to_dict(cfg), profile=profile(params), outputs=out_dir(params, "models", name)) as tracker:
            metrics, record, samples = build_base_model(name, cfg, params, device())
            for row in record["history"]:
                tracker.log_metrics({"train_loss": row["train_loss"], "val_loss": row["val_loss"]}, step=row["step"])
            tracker.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=metrics.get("steps", 0))
        write_json(out_dir(params, "metrics", "base_models", f"{name}.json"), metrics)
        write_json(out_dir(params, "samples", "base_models", f"{name}.json"), samples)
        print(f"base_model@{name}: {metrics}")
        for sample in samples[:4]:
            print(f"  {sample['prompt']!r} -> {sample['continuation']!r}")


if __name__ == "__main__":
    run_stage(main)
