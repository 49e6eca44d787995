"""What DVC shows of the results: a few headline numbers and the report's figures, at paths that are the same
whatever the profile, and each profile's complete final values and curve tables.

DVC compares two revisions file by file, path by path: `dvc metrics diff`, `dvc plots diff` and `dvc exp show` line
up the same path at both. So what they read, the report stage writes to metrics/ at the project root whatever the
profile (`write_dvc_views`), git-tracked (cache: false in dvc.yaml; a DVC experiment's commit holds only files git
may track, so never a git-ignored profile's outputs/<profile>/):

    metrics/headline.json        dvc.yaml `metrics`, the only one: the handful of numbers `dvc exp show` puts in one
                                 terminal-wide row (DVC_HEADLINE); no timing, which changes at every run
    metrics/figures/<name>.png   dvc.yaml `plots`: the report's figures (reports/<profile>/*.png), images that a
                                 browser shows without network, side by side per revision in `dvc plots diff`

and under outputs/<profile>/metrics/ (pipeline.report), the profile's record, git-tracked for the default profile:

    headline.json                per experiment group, each run's final task reward and KL per model; pass@1 and
                                 pass@<largest k> of each evaluated model; the reward model's held-out accuracy;
                                 each base model's validation perplexity; each stage's wall time in seconds
    curves/<group>.csv           one row per iteration; a column <run>/<who>/<metric> for each run, model (llm1, llm2,
                                 and for CORY runs the roles pioneer, observer) and metric; a sweep group's runs are
                                 <run>_eta<e>
    curves/<name>_front/<series>.csv   Fig. 2(c) of each swept task (<name>: pareto for IMDB, pareto_math for math,
                                 cory.report.results.SWEEP_TASKS): one row per KL coefficient eta, the series' final task
                                 reward and KL
    curves/passk.csv             Fig. 5: one row per k, a column per evaluated model

Every value is the mean over seeds; a *final* value is the mean over a run's last `report.last_n` iterations, as in
REPORT.md: `final` is the one definition of the headline numbers, which the MLflow parent run shows too
(`run_finals`). Per-seed values stay in the run folders, REPORT.md and eval/passk.json.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from cory.files import atomic_write
from cory.report.claims import final_value
from cory.report.results import SWEEP_TASKS, Inputs, Run, Sweep
from cory.schema import dotted_leaves

CURVE_METRICS = ("task_reward", "kl", "combined_reward", "distinct_1", "distinct_2", "entropy", "response_length")
"""Per-model curves of each run in curves/<group>.csv (those its history.csv has)."""
ROLE_METRICS = ("task_reward", "kl")
"""Per-role curves of each CORY run (the ablations plot the pioneer and observer of the run without role exchange)."""
HEADLINE_METRICS = ("task_reward", "kl")
"""Final values per run and model in headline.json."""
SIGNIFICANT = 6
"""Significant digits written: enough for any comparison, few enough that a diff shows what changed."""
PARETO_SERIES = {"PPO": ("ppo", "llm1"), "CORY-LLM1": ("cory", "llm1"), "CORY-LLM2": ("cory", "llm2")}
"""Fig. 2(c)'s series: label -> (algorithm of the sweep, model)."""
DVC_HEADLINE = {
    "imdb.ppo.reward": "imdb.ppo.llm1.task_reward", "imdb.ppo.kl": "imdb.ppo.llm1.kl",
    "imdb.cory.reward": "imdb.cory.llm1.task_reward", "imdb.cory.kl": "imdb.cory.llm1.kl",
    "math.ppo.pass_at_1": "passk.ppo.pass@1", "math.cory.pass_at_1": "passk.cory_llm1.pass@1",
}
"""metrics/headline.json: its key -> the key of the profile's headline.json it copies. The paper's comparison in six
numbers: IMDB's final task reward and KL (Fig. 3) and math pass@1 (Fig. 5) of PPO and CORY's LLM1 (cory = CORY-LLM1);
short keys, so that `dvc exp show` with a changed param or two fits a terminal, and names that MLflow takes as
metric names too (no "@"): the MLflow parent run logs them under the same names."""


def _round(x: float) -> float | None:
    return None if not math.isfinite(x) else float(f"{x:.{SIGNIFICANT}g}")


def models_of(run: Run) -> list[str]:
    """The models and roles a run logged: llm1 (and llm2, pioneer, observer for CORY)."""
    frame = next(iter(run.histories.values()))
    identities = [who for who in ("llm1", "llm2") if f"{who}/task_reward" in frame]
    return identities + (["pioneer", "observer"] if len(identities) == 2 else [])


def mean_curve(run: Run, key: str) -> pd.Series:
    """The mean over seeds at each iteration every seed reached (a crashed seed shortens it)."""
    return pd.DataFrame({seed: pd.Series(y) for seed, y in run.curves(key).items()}).dropna().mean(axis=1)


def final(run: Run, key: str, last_n: int) -> float | None:
    """The final value (mean over the last last_n iterations), mean over seeds; None if no seed has one."""
    values = [v for v in run.per_seed(key, lambda y: final_value(y, last_n)).values() if math.isfinite(v)]
    return _round(float(np.mean(values))) if values else None


def run_finals(inputs: Inputs, last_n: int) -> dict[str, float]:
    """Each run's final task reward and KL per model (`final`, the mean over seeds), the sweeps' runs included, as
    "headline/<group>.<run>.<llm>.<metric>": the metrics of the MLflow parent run (cory.report.pipeline_run)."""
    runs = [run for group in inputs.runs.values() for run in group.values()]
    runs += [run for sweep in inputs.sweeps.values() for run in sweep_runs(sweep).values()]
    finals = {}
    for run in runs:
        for who in (who for who in models_of(run) if who.startswith("llm")):
            for metric in HEADLINE_METRICS:
                value = final(run, f"{who}/{metric}", last_n)
                if value is not None:
                    finals[f"headline/{run.name.replace('/', '.')}.{who}.{metric}"] = value
    return dict(sorted(finals.items()))


def curves_table(runs: dict[str, Run]) -> pd.DataFrame:
    """curves/<group>.csv: an `iteration` column and <run>/<who>/<metric> columns (see the module docstring)."""
    columns = {}
    for name, run in runs.items():
        frame = next(iter(run.histories.values()))
        for who in models_of(run):
            metrics = ROLE_METRICS if who in ("pioneer", "observer") else CURVE_METRICS
            for metric in metrics:
                if f"{who}/{metric}" in frame:
                    columns[f"{name}/{who}/{metric}"] = mean_curve(run, f"{who}/{metric}")
    table = pd.DataFrame(columns)
    table.insert(0, "iteration", table.index)
    return table


def sweep_runs(sweep: Sweep) -> dict[str, Run]:
    """A sweep's runs by folder name (ppo_eta0.01, ...)."""
    return {run.name.split("/")[-1]: run for by_eta in sweep.runs.values() for run in by_eta.values()}


def pareto_front(sweep: Sweep, algorithm: str, who: str, last_n: int) -> pd.DataFrame:
    """One row per eta: the final task reward and KL of one series of a task's Fig. 2(c)."""
    rows = [{"eta": eta, "kl": final(run, f"{who}/kl", last_n), "task_reward": final(run, f"{who}/task_reward", last_n)}
            for eta, run in sorted(sweep.runs[algorithm].items())]
    return pd.DataFrame(rows, columns=["eta", "kl", "task_reward"])


def passk_table(passk: dict) -> pd.DataFrame:
    """curves/passk.csv: a `k` column and one column per evaluated model (pass@k, mean over seeds)."""
    ks = sorted({int(k) for result in passk.values() for k in result["mean"]})
    table = {"k": ks}
    table.update({model: [result["mean"].get(str(k)) for k in ks] for model, result in passk.items()})
    return pd.DataFrame(table)


def headline(inputs: Inputs, last_n: int) -> dict:
    """headline.json (see the module docstring): nested, so DVC shows e.g. `imdb.cory.llm1.task_reward`."""
    out: dict = {}
    for group, runs in inputs.runs.items():
        out[group] = {name: {who: {metric: final(run, f"{who}/{metric}", last_n) for metric in HEADLINE_METRICS}
                             for who in models_of(run) if who.startswith("llm")}
                      for name, run in runs.items()}
    out["passk"] = {}
    for model, result in inputs.passk.items():
        ks = sorted(result["mean"], key=int)
        out["passk"][model] = {f"pass@{k}": _round(float(result["mean"][k])) for k in dict.fromkeys((ks[0], ks[-1]))}
    out["reward_model"] = {key: _round(float(value)) for key, value in inputs.reward_model.items()
                           if key.startswith("accuracy")}
    out["perplexity"] = {name: _round(float(metrics["val_perplexity"])) for name, metrics in inputs.base_models.items()
                         if "val_perplexity" in metrics}
    out["seconds"] = {t["stage"]: _round(float(t["seconds"])) for t in inputs.timings if t.get("stage") != "report"}
    return out


def _write_csv(table: pd.DataFrame, path: Path) -> None:
    atomic_write(path, table.to_csv(index=False, float_format=f"%.{SIGNIFICANT}g", quoting=csv.QUOTE_MINIMAL))


def dvc_headline(summary: dict) -> dict:
    """metrics/headline.json from a profile's headline.json (`headline`): DVC_HEADLINE's numbers, nested by their
    dotted keys; a number the profile lacks is left out."""
    flat = dotted_leaves(summary)
    out: dict = {}
    for short, source in DVC_HEADLINE.items():
        if flat.get(source) is not None:
            task, algorithm, metric = short.split(".")
            out.setdefault(task, {}).setdefault(algorithm, {})[metric] = flat[source]
    return out


def write_dvc_views(summary: dict, figures: list[Path], views_dir: Path) -> list[Path]:
    """metrics/headline.json (`summary`: `dvc_headline` of the profile's headline) and metrics/figures/ (a copy of
    each of the report's `figures`; in git one object with the report's own copy) under views_dir; figures no longer
    drawn are removed. Returns the paths written."""
    folder = views_dir / "figures"
    written = []
    for figure in sorted(figures):  # each file replaced atomically, then the ones no longer drawn removed
        atomic_write(folder / figure.name, figure.read_bytes())
        written.append(folder / figure.name)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old not in written:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    atomic_write(views_dir / "headline.json", json.dumps(summary, indent=2) + "\n")
    return [*written, views_dir / "headline.json"]


def write_views(inputs: Inputs, metrics_dir: Path, last_n: int) -> list[Path]:
    """Write headline.json and curves/ under metrics_dir (everything computed first, so a failure writes nothing);
    curve files of runs no longer in the inputs are removed. Returns the paths written."""
    tables = {f"{group}.csv": curves_table(runs) for group, runs in inputs.runs.items()}
    for task, sweep in inputs.sweeps.items():
        tables[f"{sweep.group}.csv"] = curves_table(sweep_runs(sweep))
        tables.update({f"{SWEEP_TASKS[task]}_front/{label}.csv": pareto_front(sweep, algorithm, who, last_n)
                       for label, (algorithm, who) in PARETO_SERIES.items()})
    tables["passk.csv"] = passk_table(inputs.passk)
    summary = headline(inputs, last_n)
    curves = metrics_dir / "curves"
    written = []
    for name, table in tables.items():  # each file replaced atomically, then those of runs no longer read removed
        _write_csv(table, curves / name)
        written.append(curves / name)
    for old in sorted(curves.rglob("*"), reverse=True):  # files before their folders
        if old.is_file() and old not in written:
            old.unlink()
        elif old.is_dir() and not any(old.iterdir()):
            old.rmdir()
    atomic_write(metrics_dir / "headline.json", json.dumps(summary, indent=2) + "\n")
    return [*written, metrics_dir / "headline.json"]
