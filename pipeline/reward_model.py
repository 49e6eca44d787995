"""The IMDB sentiment classifier whose POSITIVE logit is the RL reward (docs/algorithm.md), a unit of the base_models
stage.

The paper scores with `lvwerra/distilbert-imdb`; offline there is none (README, "Offline sources"), so by default a GPT-2
sequence classifier is trained on the train reviews, started from the imdb_small LM's body. A `source` other than
"scratch" (the paper profile's "lvwerra/distilbert-imdb", or a folder) is only evaluated and saved.

The base_models stage trains it (`python -m pipeline.base_models reward` alone): on a GPU right after the base model
it starts from, in that model's worker process (its imports and CUDA context ready, and the reviews that model
pretrained on already tokenized: `cory.tasks.tokenizer.encode`), while the other base models still train, so neither a
stage of its own (DVC's and Python's start, ~17 s on the GPU machine) nor a GPU left to the larger model's tail is
paid for it. Like a base model it is a cached unit: its fingerprint hashes its settings, the prepared IMDB
files, the fingerprint of the model it starts from and the stage's code.

Writes outputs/<profile>/models/reward/ (model + tokenizer + training.json) and
outputs/<profile>/metrics/reward_model.json: held-out accuracy on full reviews (cut to classifier.max_length tokens)
and on their first classifier.eval_prefix_tokens tokens, the length of the texts the reward actually scores.
"""

from __future__ import annotations

import time

from cory.schema import to_dict
from cory.tracking.runs import FinishedRun
from pipeline.common import device, read_jsonl, write_json
from pipeline.params import Params
from pipeline.paths import out_dir
from pipeline.sections import REWARD, SCRATCH, RewardModelConfig
from pipeline.units import RECORD, content_digest, stale
from pipeline.units import digest as unit_digest

STAGE = "reward_model"
"""The reward model's MLflow run name (and run key)."""

# transformers and the classifier's code are imported where the model is built, in the worker process (as the base
# models': the stage's own process only checks inputs, fingerprints and starts the workers)

CODE = ("pipeline/reward_model.py", "cory/tasks/classifier.py")
"""The base_models stage's code that only the reward model runs: a change to it leaves the base models current."""


def prerequisite(params: Params) -> str | None:
    """The base model the reward model starts from (reward_model.init_from with source scratch), else None."""
    cfg = params.reward_model
    return cfg.init_from if cfg.source == SCRATCH else None


def build_reward_model(cfg: RewardModelConfig, params: Params, device: str, digest: str | None = None
                       ) -> tuple[dict, dict]:
    """Train (or load) the classifier (cory.tasks.classifier.reward_model), save it with its tokenizer and training
    record (which keeps `digest`, its fingerprint); returns (metrics, training record)."""
    from cory.hf import save_model
    from cory.tasks.classifier import reward_model
    from cory.tasks.training import write_record

    data = out_dir(params, "data", "imdb")
    train, validation = read_jsonl(data / "train.jsonl"), read_jsonl(data / "validation.jsonl")
    init_dir = None
    if cfg.source == SCRATCH and cfg.init_from:
        init_dir = out_dir(params, "models", cfg.init_from)
        if not (init_dir / "config.json").is_file():
            raise FileNotFoundError(f"reward_model.init_from: {init_dir} holds no model (run the base_models stage: "
                                    f"dvc repro base_models)")
    source = None if cfg.source == SCRATCH else cfg.source
    model, tokenizer, metrics, history = reward_model(cfg.classifier, source, cfg.tokenizer, init_dir, train,
                                                      validation, device)
    model_dir = out_dir(params, "models", REWARD)
    save_model(model, tokenizer, model_dir)
    record = write_record(model_dir / RECORD, {"source": cfg.source, "config": to_dict(cfg), "history": history},
                          device, digest)
    return metrics, record


def fingerprint(params: Params, init_digest: str | None, code: str) -> str:
    """What the reward model depends on, hashed: its settings, the prepared IMDB files by content, the fingerprint of
    the base model it starts from (`init_digest`) and the stage's code (`code`)."""
    parts = {
        "config": to_dict(params.reward_model),
        "data": content_digest(str(out_dir(params, "data", "imdb"))),
        "init": init_digest,
        "code": code,
    }
    return unit_digest(parts)


def why_stale(params: Params, fingerprint: str) -> str | None:
    """Why the reward model is trained again (pipeline.units.stale), or None where it is kept."""
    metrics = out_dir(params, "metrics", "reward_model.json")
    return stale(out_dir(params, "models", REWARD, RECORD), [metrics], fingerprint)


def train_reward(digest: str, params: Params) -> FinishedRun:
    """Train (or load) the reward model and write its outputs; returns its MLflow run, which the stage's process
    logs (log_finished). Runs in the worker process of the base model it starts from when the stage's models train
    at once."""
    entered = time.time()
    cfg = params.reward_model
    metrics, record = build_reward_model(cfg, params, device(), digest)
    metrics["seconds"] = time.time() - entered  # the whole of its work
    write_json(out_dir(params, "metrics", "reward_model.json"), metrics)
    print(f"reward_model: {metrics}", flush=True)
    history = [(row["step"], {"train_loss": row["train_loss"], "accuracy": row["accuracy"]}) for row in record["history"]]
    return FinishedRun.of_training(STAGE, to_dict(cfg), out_dir(params, "models", REWARD), entered, history, metrics)
