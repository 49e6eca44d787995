"""What a training run logs: every metric key defined once (the glossary), text diversity, and the file writers.

Keys are namespaced. `llm1/` and `llm2/` follow model identity (LLM1 is the copy that starts as pioneer), `pioneer/`
and `observer/` follow the role, so after a role exchange `pioneer/kl` continues with the other model while
`llm1/kl` continues with the same one. A single-agent PPO run logs only `llm1/` and `pioneer/`.

`MetricsWriter` refuses any key missing from `GLOSSARY`, so a new metric cannot be logged without a definition.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from cory.files import atomic_write, write_json, write_jsonl

IDENTITIES = {
    "llm1": "LLM1, the model copy that starts as pioneer (follows the model across role exchanges)",
    "llm2": "LLM2, the model copy that starts as observer (follows the model across role exchanges)",
}
ROLES = {
    "pioneer": "the agent playing pioneer this iteration (answers the query alone)",
    "observer": "the agent playing observer this iteration (sees the query and the pioneer's response)",
}

AGENT_METRICS = {
    "task_reward": "mean task score r(s_0, a) of the agent's own responses (sentiment logit / math 0-1), batch mean",
    "kl": "exact KL(pi_theta || pi_ref) over the full vocabulary per response token, summed over the response, "
    "batch mean; always exact, whatever estimator `ppo.kl_penalty` uses in the reward",
    "combined_reward": "task_reward - eta * kl: the paper's comparison metric r_c (§4.1), eta = train.eta",
    "training_score": "collective reward r_self + c * r_partner the agent was trained on (c = partner_reward_coef; "
    "PPO: r_self), batch mean, before score scaling",
    "kl_coef": "beta of the agent's KL controller after this iteration's update",
    "kl_penalty": "mean over the batch of sum_t -beta * KL_estimator_t (the non-score reward of the PPO step; "
    "train.algorithm grpo: its loss's k3 term, beta = grpo.kl_coef)",
    "policy_loss": "PPO clipped surrogate loss, masked token mean, averaged over mini-batches and epochs (train."
    "algorithm rloo: over each answer's whole-sequence ratio, mean over answers; grpo: without its KL term)",
    "value_loss": "0.5 * clipped squared value error, masked token mean, averaged over mini-batches and epochs",
    "policy_clipfrac": "fraction of response tokens whose ratio was clipped, averaged over mini-batches and epochs",
    "value_clipfrac": "fraction of response tokens whose value was clipped, averaged over mini-batches and epochs",
    "approx_kl": "0.5 * mean (logp - logp_old)^2 over response tokens in the update (drift from the rollout policy)",
    "entropy": "mean per-token entropy of pi_theta on the agent's responses (nats)",
    "response_length": "mean response length in tokens, EOS included",
    "distinct_1": "distinct unigrams / total unigrams over the batch's responses (whitespace tokens)",
    "distinct_2": "distinct bigrams / total bigrams over the batch's responses (whitespace tokens)",
    "skipped_minibatches": "mini-batches left out of the update (no backward): mean ratio above ppo.ratio_threshold, "
    "or a non-finite loss",
    "skipped_steps": "optimizer steps not taken because the gradient was not finite (the gradient is dropped; "
    "ppo.on_nonfinite: skip, else the run stops)",
    "dropped_samples": "samples left out of this iteration's update because a task score was not finite (their "
    "whole query group with ppo.group_baseline; ppo.on_nonfinite: skip, else the run stops)",
}
IDENTITY_ONLY_METRICS = {
    "role": "role played this iteration: 0 = pioneer, 1 = observer",
    "probe_task_reward": "mean task score of the agent used alone (pioneer prompt) on the same train.probe_queries RL "
    "prompts, train.probe_samples answers each, every train.probe_every iterations (empty in between): a training "
    "reward that does not move with which prompts a batch drew",
}
RUN_METRICS = {
    "iteration": "training iteration, counted from 0 (the step of every row)",
    "swap": "1 if the roles were exchanged after this iteration, else 0",
    "timing/generation": "seconds spent sampling responses (both roles) this iteration",
    "timing/scoring": "seconds spent computing task rewards this iteration",
    "timing/update": "seconds spent in the PPO updates (experience + epochs, both agents) this iteration",
    "timing/iteration": "timing/generation + timing/scoring + timing/update: seconds of the iteration's timed phases",
}
EVAL_METRICS = {
    "pass@k": "unbiased pass@k of Chen et al. 2021: 1 - C(n-c, k) / C(n, k) for a problem with c correct answers out "
    "of n samples, mean over problems (evaluate stage, eval/passk.json; not logged per iteration)",
    "eval/<model>/pass_at_k": "pass@k of the model, mean over its training seeds, in MLflow with step = k",
    "eval/<model>/seed<s>/pass_at_k": "pass@k of the model trained with seed s, in MLflow with step = k",
}


def _build_glossary() -> dict[str, str]:
    glossary = dict(RUN_METRICS)
    for prefix, who in {**IDENTITIES, **ROLES}.items():
        for name, text in AGENT_METRICS.items():
            glossary[f"{prefix}/{name}"] = f"{who}: {text}"
    for prefix, who in IDENTITIES.items():
        for name, text in IDENTITY_ONLY_METRICS.items():
            glossary[f"{prefix}/{name}"] = f"{who}: {text}"
    return glossary


GLOSSARY: dict[str, str] = _build_glossary()
"""Every key logged per training iteration -> its definition. Column order of history.csv follows this order."""

_ORDER = {key: i for i, key in enumerate(GLOSSARY)}


def describe(key: str) -> str:
    """The definition of a logged key, e.g. describe("llm2/kl")."""
    if key not in GLOSSARY:
        raise KeyError(f"metric {key!r} is not in the glossary (cory/rl/metrics.py); define it there before logging it")
    return GLOSSARY[key]


# --------------------------------------------------------------------------------------------------------------------
# Diversity
# --------------------------------------------------------------------------------------------------------------------


def distinct_n(texts: list[str], n: int, tokenizer: Callable[[str], Sequence[Hashable]] | None = None) -> float:
    """Distinct-n of Li et al. 2016: distinct n-grams / total n-grams, pooled over all `texts`.

    Tokens are whitespace-separated words unless `tokenizer` (e.g. `hf_tokenizer.tokenize`) is given. A batch with
    no n-gram at all (every text shorter than n tokens) has distinct-n 0.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    split = tokenizer or str.split
    ngrams = []
    for text in texts:
        tokens = list(split(text))
        ngrams.extend(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    return len(set(ngrams)) / len(ngrams) if ngrams else 0.0


# --------------------------------------------------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------------------------------------------------


def _check_keys(keys) -> None:
    for key in keys:
        describe(key)


def _cell(value: float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


class MetricsWriter:
    """Writes one run's files into `run_dir`: history.csv (a DVC plot), summary.json (DVC metrics), samples.jsonl.

    history.csv is written row by row, so a crashed run keeps its history up to the crash. Its columns are the keys
    of the first row, in glossary order; later rows may leave a column out (empty cell) but may not add one (a
    ValueError names the key), since a CSV header cannot grow after it is written. Every key must be in GLOSSARY.
    """

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.history_path = self.run_dir / "history.csv"
        self.rows: list[dict[str, float]] = []
        self.columns: list[str] | None = None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Append one row; `step` is its `iteration` column (a metrics["iteration"] must agree with it)."""
        if metrics.get("iteration", step) != step:
            raise ValueError(f"log(step={step}) got metrics['iteration'] = {metrics['iteration']}")
        row = {**metrics, "iteration": step}
        _check_keys(row)
        if self.columns is None:
            self.columns = sorted(row, key=_ORDER.__getitem__)
            with open(self.history_path, "w", newline="") as fh:
                csv.writer(fh).writerow(self.columns)
        extra = [key for key in row if key not in self.columns]
        if extra:
            raise ValueError(
                f"{self.history_path}: {', '.join(extra)} not among the columns of the first row; log every key "
                "from the first iteration on"
            )
        with open(self.history_path, "a", newline="") as fh:  # a None value (nothing measured) is an empty cell
            csv.writer(fh).writerow([_cell(row[key]) if row.get(key) is not None else "" for key in self.columns])
        self.rows.append(row)

    @classmethod
    def of_history(cls, run_dir: str | Path) -> "MetricsWriter":
        """The writer of a finished run, its rows read back from history.csv (nothing is written): for its final
        values over another number of iterations."""
        writer = cls(run_dir)
        with open(writer.history_path, newline="") as fh:
            reader = csv.reader(fh)
            writer.columns = next(reader)
            writer.rows = [{k: float(v) for k, v in zip(writer.columns, row) if v != ""} for row in reader]
        return writer

    def resume(self, iterations: int) -> list[dict[str, float]]:
        """Continue a killed run: keep the first `iterations` rows of history.csv (those its checkpoint covers), drop
        any later ones, and return the kept rows."""
        with open(self.history_path, newline="") as fh:
            reader = csv.reader(fh)
            columns = next(reader, None)
            cells = [row for _, row in zip(range(iterations), reader)]
        if columns is None or len(cells) < iterations:
            raise ValueError(f"{self.history_path}: holds {len(cells)} rows, fewer than the {iterations} iterations "
                             "its run's checkpoint covers")
        self.columns = columns
        self.rows = [{k: float(v) for k, v in zip(columns, row) if v != ""} for row in cells]
        text = io.StringIO()
        csv.writer(text).writerows([columns, *cells])
        atomic_write(self.history_path, text.getvalue())  # a kill meanwhile leaves the rows the checkpoint covers
        return self.rows

    def final_values(self, last_n: int) -> dict[str, float]:
        """Mean of each key over the last `last_n` rows (rows that lack the key are left out of its mean).

        A non-finite mean becomes None, so summary.json stays valid JSON for DVC."""
        if last_n < 1:
            raise ValueError(f"last_n must be >= 1, got {last_n}")
        tail = self.rows[-last_n:]
        final = {}
        for key in self.columns or []:
            values = [float(row[key]) for row in tail if row.get(key) is not None]
            if values and key != "iteration":
                mean = sum(values) / len(values)
                final[key] = mean if math.isfinite(mean) else None
        return final

    def summary(self, last_n: int = 10, **extra: Any) -> dict[str, Any]:
        """Write summary.json: {"final": mean of each key over the last `last_n` iterations, "iterations", "last_n",
        **extra} (extra: anything JSON-serialisable, e.g. wall time or the resolved config); returns it."""
        clash = {"final", "iterations", "last_n"} & set(extra)
        if clash:
            raise ValueError(f"summary(): {', '.join(sorted(clash))} is reserved")
        summary = {"final": self.final_values(last_n), "iterations": len(self.rows), "last_n": last_n, **extra}
        write_json(self.run_dir / "summary.json", summary)  # atomically: a kill leaves the old one or this one
        return summary

    def samples(self, rows: list[dict[str, Any]]) -> None:
        """Write samples.jsonl: one JSON object per generation (free-form columns such as query, response, score),
        a score that is not finite as null (strict JSON)."""
        write_jsonl(self.run_dir / "samples.jsonl", rows)
