"""What the settings ask of the data, the models and the machine, checked before any stage runs (pipeline.params
calls `check_sizes`): sampled lengths against the models' positions, prompt counts against the batches that draw
from them, the test problems against pass@k's, and the evaluation's size against a stated memory limit.

Each of these used to fail late: a response length past a model's positions at the first iteration of every run
(after the base models had trained), a prompt file too small for a batch when the train stage started, an absurd
`evaluation.n_samples` as the evaluate stage was killed for memory. Here each is one ConfigError naming the setting.
Where a bound is known only once a model is loaded (a hub model's positions), the train stage checks it before any
run starts (pipeline.jobs.check_positions). Torch-free, as all of validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cory.schema import check
from pipeline.sections import CHECKPOINT

EVAL_TOKEN_LIMIT = 2**28
"""The most response tokens one pass@k evaluation of a model may sample (n_problems x n_samples x max_new_tokens):
it holds every sample at once (prompt and response ids and masks as int64 tensors, and the texts), about 40 bytes
per response token, so 2^28 tokens are about 10 GiB of host memory per model evaluated at once. The default profile
samples 200 x 16 x 80 = 0.26M, the paper profile 1319 x 16 x 256 = 5.4M."""

GSM8K_TEST = 1319
"""Problems in GSM8K's test split (data.math.source gsm8k with n_test null)."""

PROMPT_FILES = {"data/imdb/prompts.jsonl": "imdb", "data/math/rl.jsonl": "math"}
"""The RL prompt files the data stages write (relative to outputs/<profile>/), by the data section that sizes them."""


def written_at(raw: dict, group: str, run: str | None, path: tuple[str, ...]) -> str:
    """The dotted name of the train block that sets `path` for a run: its own, its group's, or the top-level one
    (where no block writes it, the top-level name: the default applies there)."""
    exp = raw["experiments"][group]
    base_run = run.split("_eta")[0] if run is not None and run not in exp["runs"] else run
    layers = [(f"experiments.{group}.runs.{base_run}.train", ((exp["runs"].get(base_run) or {}).get("train") or {})),
              (f"experiments.{group}.train", exp.get("train") or {}), ("train", raw.get("train") or {})]
    for name, layer in layers:
        for key in path:
            layer = layer.get(key) if isinstance(layer, dict) else None
        if layer is not None:
            return f"{name}.{'.'.join(path)}"
    return f"train.{'.'.join(path)}"


def scratch_positions(tree, name: str) -> tuple[int, str] | None:
    """(positions, setting) of base model `name` where validation knows them (a model trained here), else None."""
    cfg = tree.base_models.get(name)
    if cfg is None or cfg.source != "scratch":
        return None
    return cfg.lm.n_positions, f"base_models.{name}.lm.n_positions"


def check_response_lengths(tree, raw: dict, jobs: dict[str, list]) -> None:
    """Each run's longest response leaves at least one of its model's positions for the prompt: past them a decoding
    step has no position embedding, and cory.rl.rollout.generate refuses the draw at the run's first iteration."""
    for group, group_jobs in jobs.items():
        for job in group_jobs:
            known = scratch_positions(tree, job.model)
            longest = job.train.ppo.generation.response_length[1]
            if known is not None and longest >= known[0]:
                where = written_at(raw, group, job.run, ("ppo", "generation", "response_length"))
                check(False, where, f"{longest} new tokens leave no room for a prompt in the model's {known[0]} "
                      f"positions ({known[1]}; run {job.name})")


def evaluated_base_models(tree, jobs: dict[str, list]) -> dict[str, str]:
    """{evaluation.models entry: the base model it is, or was trained from}, for the entries validation can place."""
    found = {}
    for name, folder in tree.evaluation.models.items():
        if folder.startswith("models/"):
            found[name] = folder.removeprefix("models/")
        elif (match := CHECKPOINT.fullmatch(folder)) and match["group"] in jobs:
            runs = {job.run: job for job in jobs[match["group"]]}
            if match["run"] in runs:
                found[name] = runs[match["run"]].model
    return found


def check_eval_lengths(tree, jobs: dict[str, list]) -> None:
    """evaluation.max_new_tokens leaves room for a prompt in each evaluated model's positions."""
    tokens = tree.evaluation.max_new_tokens
    for name, model in evaluated_base_models(tree, jobs).items():
        known = scratch_positions(tree, model)
        if known is not None:
            check(tokens < known[0], "evaluation.max_new_tokens", f"{tokens} new tokens leave no room for a prompt "
                  f"in the model's {known[0]} positions ({known[1]}; evaluation.models.{name})")


def prompt_count(tree, prompts: str) -> tuple[int | None, str] | None:
    """(the most prompts the data stage writes into `prompts`, the setting that bounds them; None: unbounded), or
    None for a file no data stage writes."""
    section = PROMPT_FILES.get(Path(prompts).as_posix())
    if section == "imdb":
        return tree.data.imdb.max_rl_prompts, "data.imdb.max_rl_prompts"
    if section == "math":
        math = tree.data.math
        if math.source == "generated":
            return math.generator.n_rl, "data.math.generator.n_rl"
        return math.n_rl, "data.math.n_rl"
    return None


def check_prompt_counts(tree, jobs: dict[str, list]) -> None:
    """Every run's prompt file can hold the distinct queries one of its batches draws (the train stage checks the
    files themselves once they are written: pipeline.jobs.check_prompts)."""
    for group, group_jobs in jobs.items():
        for job in group_jobs:
            bound = prompt_count(tree, job.task.prompts)
            need = job.train.ppo.queries_per_batch
            if bound is not None and bound[0] is not None:
                check(bound[0] >= need, bound[1], f"{bound[0]} prompts cannot fill a batch of run {job.name}: it "
                      f"draws {need} distinct queries per iteration (train.ppo.batch_size "
                      f"{job.train.ppo.batch_size} / samples_per_query {job.train.ppo.samples_per_query})")


def evaluated_problems(tree) -> tuple[int, str]:
    """(how many test problems pass@k evaluates, the setting that says so)."""
    math, cfg = tree.data.math, tree.evaluation
    if cfg.n_problems is not None:
        return cfg.n_problems, "evaluation.n_problems"
    if math.source == "generated":
        return math.generator.n_test, "data.math.generator.n_test"
    return (math.n_test, "data.math.n_test") if math.n_test is not None else (GSM8K_TEST, "data.math.n_test")


def check_test_problems(tree) -> None:
    """The data stage writes at least the test problems pass@k evaluates, and some; the math base model keeps
    pretraining problems after its holdout."""
    math = tree.data.math
    if math.source != "generated":
        return
    n_test = math.generator.n_test
    check(n_test > 0, "data.math.generator.n_test", "must be > 0: pass@k evaluates the test problems")
    wanted = tree.evaluation.n_problems
    check(wanted is None or wanted <= n_test, "evaluation.n_problems",
          f"{wanted} problems asked, but data.math.generator.n_test writes {n_test}")
    for name, cfg in tree.base_models.items():
        if cfg.source == "scratch" and cfg.corpus == "math":
            check(cfg.holdout < math.generator.n_pretrain, f"base_models.{name}.holdout",
                  f"{cfg.holdout} held out leaves none of data.math.generator.n_pretrain = "
                  f"{math.generator.n_pretrain} problems to train on")


def check_eval_size(tree) -> None:
    """pass@k's samples fit EVAL_TOKEN_LIMIT; the line names the factor furthest above its default."""
    from cory.tasks.config import EvalConfig

    cfg = tree.evaluation
    problems, source = evaluated_problems(tree)
    tokens = problems * cfg.n_samples * cfg.max_new_tokens
    if tokens <= EVAL_TOKEN_LIMIT:
        return
    factors = {"evaluation.n_samples": cfg.n_samples / EvalConfig.n_samples,  # against the defaults (500 problems:
               "evaluation.max_new_tokens": cfg.max_new_tokens / EvalConfig.max_new_tokens,  # the generator's n_test)
               source: problems / 500}
    check(False, max(factors, key=factors.get),
          f"{problems} problems ({source}) x {cfg.n_samples} samples (evaluation.n_samples) x {cfg.max_new_tokens} "
          f"tokens (evaluation.max_new_tokens) = {tokens:.3g} tokens, past the {EVAL_TOKEN_LIMIT:.3g} one evaluation "
          "may hold in memory (pipeline.sizes.EVAL_TOKEN_LIMIT: about 40 bytes each)")


def check_sizes(tree, raw: dict[str, Any], jobs: dict[str, list]) -> None:
    check_response_lengths(tree, raw, jobs)
    check_eval_lengths(tree, jobs)
    check_prompt_counts(tree, jobs)
    check_test_problems(tree)
    check_eval_size(tree)
