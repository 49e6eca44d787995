"""Run outputs as the report reads them: every seed of every run the paper's figures need, loaded and checked.

The train stage writes outputs/<profile>/runs/<group>/<run>/seed<k>/{history.csv, summary.json, config.json,
samples.jsonl} (cory.experiments); evaluate writes eval/passk.json; the model stages write metrics/ and samples/.
`load_inputs` reads all of it up front, so a missing group, run, seed or file is one clear error naming the path,
before any statistic is computed or figure drawn.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cory.config import ConfigError

EXPECTED_RUNS = {
    "imdb": ("ppo", "ppo_2x", "cory", "cory_no_kt", "cory_no_rex", "cory_competitive"),
    "math": ("ppo", "cory"),
}
"""Experiment group -> the runs the report's figures and claims read (run folders under outputs/<profile>/runs/
<group>/). A run named ppo* is single-agent PPO, any other CORY. `check_report_inputs` checks them against params."""
PARETO_GROUP = "pareto"
"""Group of the KL-coefficient sweep: runs ppo_eta<e> and cory_eta<e> (Fig. 2c), from its runs ppo and cory."""
PASSK_MODELS = ("base", "ppo", "cory_llm1", "cory_llm2")
"""Models of eval/passk.json drawn in Fig. 5 (params evaluation.models)."""


def check_report_inputs(jobs: dict[str, list], models: dict[str, str]) -> None:
    """The runs and models the report reads are what params train and evaluate: each expected run in its group
    with its algorithm, the sweep group with both algorithms, each Fig. 5 model in evaluation.models. Called by
    pipeline.params.validate, so a renamed run stops `dvc repro` before training rather than in the report.

    `jobs` is group -> its resolved cory.experiments.Job list. Params without any of the report's groups (a side
    experiment such as scripts/variants.py writes) are not checked: no report is made of them."""
    if not any(group in jobs for group in (*EXPECTED_RUNS, PARETO_GROUP)):
        return
    for group, names in EXPECTED_RUNS.items():
        if group not in jobs:
            raise ConfigError(f"experiments.{group}: missing; the report reads its runs {', '.join(names)} "
                              "(cory/results.py EXPECTED_RUNS)")
        algorithms = {job.run: job.algorithm for job in jobs[group]}
        for name in names:
            where = f"experiments.{group}.runs.{name}"
            if name not in algorithms:
                raise ConfigError(f"{where}: missing; the report reads this run (cory/results.py EXPECTED_RUNS)")
            expected = "ppo" if name.split("_")[0] == "ppo" else "cory"
            if algorithms[name] != expected:
                raise ConfigError(f"{where}: the report reads it as a {expected.upper()} run, but it trains "
                                  f"{'one agent' if expected == 'cory' else 'two agents'} (train.cory.n_agents)")
    sweep = {job.run.rsplit("_eta", 1)[0] for job in jobs.get(PARETO_GROUP, ()) if "_eta" in job.run}
    if sweep != {"ppo", "cory"}:
        raise ConfigError(f"experiments.{PARETO_GROUP}: the report's Fig. 2c needs this group with runs ppo and cory "
                          f"and a sweep_eta, got sweep runs {sorted(sweep) or 'none'}")
    missing = [m for m in PASSK_MODELS if m not in models]
    if missing:
        raise ConfigError(f"evaluation.models: needs {', '.join(missing)} (Fig. 5 draws {', '.join(PASSK_MODELS)})")


@dataclass
class Run:
    """One run over its seeds: each seed's history (rows = iterations), the resolved config, samples, wall times."""

    name: str
    histories: dict[int, pd.DataFrame]
    config: dict
    samples: list[dict]
    wall_time_s: dict[int, float]
    peak_gpu_memory_gib: dict[int, float] = field(default_factory=dict)
    """seed -> peak GPU memory of its process (NaN on CPU or in runs written before it was recorded)."""

    @property
    def seeds(self) -> list[int]:
        return sorted(self.histories)

    def curves(self, key: str) -> dict[int, np.ndarray]:
        """seed -> the metric over iterations; a clear error if history.csv lacks the column."""
        out = {}
        for seed, frame in self.histories.items():
            if key not in frame:
                raise ValueError(f"{self.name}/seed{seed}/history.csv has no column {key!r} (see cory/metrics.py)")
            out[seed] = frame[key].to_numpy(float)
        return out

    def per_seed(self, key: str, statistic: Callable[[np.ndarray], float]) -> dict[int, float]:
        return {seed: float(statistic(y)) for seed, y in self.curves(key).items()}


def load_run(run_dir: Path, seeds: list[int] | None = None) -> Run:
    """A run folder with its seed<k>/ subfolders: those of `seeds`, or every one found if None."""
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: run folder not found (did the train stage run it?)")
    if seeds is None:
        seeds = sorted(int(p.name[4:]) for p in run_dir.glob("seed*") if p.name[4:].isdigit())
        if not seeds:
            raise FileNotFoundError(f"{run_dir}: no seed<k>/ folders")
    histories, wall, memory, config, samples = {}, {}, {}, {}, []
    for seed in seeds:
        folder = run_dir / f"seed{seed}"
        for name in ("history.csv", "summary.json", "config.json", "samples.jsonl"):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder / name}: not found (did the train stage finish this seed?)")
        histories[seed] = pd.read_csv(folder / "history.csv").sort_values("iteration").reset_index(drop=True)
        summary = json.loads((folder / "summary.json").read_text())
        wall[seed] = float(summary.get("wall_time_s", math.nan))
        memory[seed] = float(summary.get("peak_gpu_memory_gib") or math.nan)
        if not config:  # seeds differ only in `seed`: the first one's config stands for the run
            config = json.loads((folder / "config.json").read_text())
            samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines() if line]
    name = "/".join(run_dir.parts[-2:])
    return Run(name, histories, config, samples, wall, memory)


def _group_dir(runs_dir: Path, group: str) -> Path:
    path = runs_dir / group
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: experiment group folder not found (the train stage writes it for {group!r})")
    return path


@dataclass
class Inputs:
    """Everything the report reads, loaded and checked up front."""

    runs: dict[str, dict[str, Run]]
    """group -> run name -> Run (the EXPECTED_RUNS)."""
    pareto: dict[str, dict[float, Run]]
    """"ppo" / "cory" -> eta -> Run."""
    passk: dict
    base_models: dict[str, dict]
    reward_model: dict
    base_samples: dict[str, list[dict]]
    timings: list[dict] = field(default_factory=list)


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (did its stage run?)")
    return json.loads(path.read_text())


def _json_folder(path: Path) -> dict[str, dict]:
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: folder not found (did its stage run?)")
    return {p.stem: json.loads(p.read_text()) for p in sorted(path.glob("*.json"))}


def load_inputs(outputs: Path, seeds: list[int] | None = None) -> Inputs:
    """Read outputs/<profile>/ (see the module docstring); `seeds` None takes every seed folder of each run."""
    runs_dir = outputs / "runs"
    runs = {}
    for group, names in EXPECTED_RUNS.items():
        folder = _group_dir(runs_dir, group)
        runs[group] = {name: load_run(folder / name, seeds) for name in names}
    pareto: dict[str, dict[float, Run]] = {"ppo": {}, "cory": {}}
    folder = _group_dir(runs_dir, PARETO_GROUP)
    for path in sorted(folder.iterdir()):
        match = re.fullmatch(r"(ppo|cory)_eta(.+)", path.name)
        if match and path.is_dir():
            pareto[match[1]][float(match[2])] = load_run(path, seeds)
    for algorithm, points in pareto.items():
        if not points:
            raise FileNotFoundError(f"{folder}: no {algorithm}_eta<e>/ run folders (the sweep of Fig. 2c)")
    passk = _read_json(outputs / "eval" / "passk.json")
    missing = [m for m in PASSK_MODELS if m not in passk]
    if missing:
        raise ValueError(f"{outputs / 'eval' / 'passk.json'}: no results for {', '.join(missing)} (evaluation.models)")
    timing_dir = outputs / "metrics" / "timing"
    timings = list(_json_folder(timing_dir).values()) if timing_dir.is_dir() else []
    return Inputs(
        runs=runs,
        pareto=pareto,
        passk=passk,
        base_models=_json_folder(outputs / "metrics" / "base_models"),
        reward_model=_read_json(outputs / "metrics" / "reward_model.json"),
        base_samples=_json_folder(outputs / "samples" / "base_models"),
        timings=timings,
    )
