"""Run outputs as the report reads them: every seed of every run the paper's figures need, loaded and checked.

The train stage writes outputs/<profile>/runs/<group>/<run>/seed<k>/{history.csv, summary.json, config.json,
samples.jsonl} (cory.runs); evaluate writes eval/passk.json; the model stages write metrics/ and samples/.
`load_inputs` reads all of it up front, so a missing group, run, seed or file is one clear error naming the path,
before any statistic is computed or figure drawn. Which groups to read comes from params: the groups of
EXPECTED_RUNS with the runs of IMDB_RUNS they have, the runs report.mechanism names, and each task's KL-coefficient
sweep (the group with a `sweep_eta`, SWEEP_TASKS), on the seeds each group ran.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where histories are read: every stage checks params through this module
    import pandas as pd

from cory.files import read_json, read_jsonl
from cory.runs.config import ExperimentConfig, eta_name
from cory.schema import ConfigError

EXPECTED_RUNS = {
    "imdb": ("ppo", "cory"),
    "math": ("ppo", "cory"),
}
"""Experiment group -> the runs the report's figures and claims need (run folders under outputs/<profile>/runs/
<group>/). A run named ppo* is single-agent PPO, any other CORY. `check_report_inputs` checks them against params."""
IMDB_RUNS = ("ppo", "ppo_2x", "cory", "cory_no_kt", "cory_no_rex", "cory_competitive")
"""The runs an IMDB group's claims read where the group has them (the 2x-parameter model, the ablations, the
competitive partner reward); a claim whose run the group lacks is "not tested in this profile"."""
SWEEP_RUNS = ("ppo", "cory")
"""The runs of a KL-coefficient sweep (a group with sweep_eta): folders ppo_eta<e> and cory_eta<e> (Fig. 2c)."""
SWEEP_TASKS = {"imdb": "pareto", "math": "pareto_math"}
"""Task -> the name of its Fig. 2(c) frontier in the report: figure fig2c_<name>.png, claim `<name>`, DVC tables
curves/<name>_front/. The paper's Fig. 2(c) is GSM8K (math); the IMDB frontier is this reproduction's addition. A
task without a sweep group in params gets no figure and a claim that is not measurable."""
PASSK_MODELS = ("base", "ppo", "cory_llm1", "cory_llm2")
"""Models of eval/passk.json drawn in Fig. 5 (params evaluation.models)."""


def sweep_groups(experiments: dict[str, ExperimentConfig]) -> dict[str, str]:
    """Task -> the experiment group that sweeps its KL coefficient (the group with a sweep_eta); at most one a task,
    since the report draws one frontier per task."""
    sweeps: dict[str, str] = {}
    for group, exp in experiments.items():
        if not exp.sweep_eta:
            continue
        if exp.task in sweeps:
            raise ConfigError(f"experiments.{group}.sweep_eta: experiments.{sweeps[exp.task]} sweeps task "
                              f"{exp.task!r} already; the report draws one Fig. 2c frontier per task")
        sweeps[exp.task] = group
    return sweeps


def _check_algorithms(group: str, algorithms: dict[str, str], names: tuple[str, ...], why: str) -> None:
    """Each of `names` is a run of the group (`algorithms`: run name -> "ppo" or "cory"), single-agent PPO if named
    ppo*, else CORY."""
    for name in names:
        where = f"experiments.{group}.runs.{name}"
        if name not in algorithms:
            raise ConfigError(f"{where}: missing; {why}")
        expected = "ppo" if name.split("_")[0] == "ppo" else "cory"
        if algorithms[name] != expected:
            raise ConfigError(f"{where}: the report reads it as a {expected.upper()} run, but it trains "
                              f"{'one agent' if expected == 'cory' else 'two agents'} (train.cory.n_agents)")


def check_report_inputs(jobs: dict[str, list], models: dict[str, str],
                        experiments: dict[str, ExperimentConfig]) -> None:
    """The runs and models the report reads are what params train and evaluate: each expected run in its group
    with its algorithm (and each run of IMDB_RUNS the `imdb` group has), each task's sweep group (if any) with runs
    ppo and cory, each Fig. 5 model in evaluation.models. Called by pipeline.params.validate, so a renamed run stops
    `dvc repro` before training rather than in the report.

    `jobs` is group -> its resolved cory.runs.config.Job list. Params without any of the report's groups (a side
    experiment's own params file) are not checked: no report is made of them."""
    if not any(group in jobs for group in EXPECTED_RUNS):
        return
    for group, names in EXPECTED_RUNS.items():
        if group not in jobs:
            raise ConfigError(f"experiments.{group}: missing; the report reads its runs {', '.join(names)} "
                              "(cory/report/results.py EXPECTED_RUNS)")
        algorithms = {job.run: job.algorithm for job in jobs[group]}
        present = tuple(n for n in IMDB_RUNS if n in algorithms) if group == "imdb" else ()
        _check_algorithms(group, algorithms, tuple(dict.fromkeys((*names, *present))),
                          "the report reads this run (cory/report/results.py EXPECTED_RUNS)")
    for task, group in sweep_groups(experiments).items():
        if task not in SWEEP_TASKS:
            raise ConfigError(f"experiments.{group}.task: the report draws Fig. 2c for the tasks "
                              f"{', '.join(SWEEP_TASKS)} only (cory/report/results.py SWEEP_TASKS), not {task!r}")
        # a sweep's run folders are <run>_eta<e>: the algorithm of each run of the group's `runs`
        swept = {job.run.rsplit("_eta", 1)[0]: job.algorithm for job in jobs[group]}
        _check_algorithms(group, swept, SWEEP_RUNS, f"the report's Fig. 2c of task {task!r} reads the sweep's runs "
                          f"{' and '.join(SWEEP_RUNS)} (cory/report/results.py SWEEP_RUNS)")
    missing = [m for m in PASSK_MODELS if m not in models]
    if missing:
        raise ConfigError(f"evaluation.models: needs {', '.join(missing)} (Fig. 5 draws {', '.join(PASSK_MODELS)})")


IMDB_REQUIRED = EXPECTED_RUNS["imdb"]
"""The runs every IMDB group of report.imdb_groups needs; the claims of any other run it lacks are not tested."""


def check_imdb_group(group: str, jobs: list) -> None:
    """An IMDB group the claims are made for (report.imdb_groups) has runs ppo and cory, and each run of IMDB_RUNS it
    has trains the algorithm its name says."""
    algorithms = {job.run: job.algorithm for job in jobs}
    names = tuple(dict.fromkeys((*IMDB_REQUIRED, *(n for n in IMDB_RUNS if n in algorithms))))
    _check_algorithms(group, algorithms, names, "report.imdb_groups lists this group, whose claims read it")


def check_mechanism(rule, jobs: dict[str, list], test_claims: bool = True) -> None:
    """report.mechanism (cory.report.config.MechanismConfig) names runs its group trains: frontier runs of single-agent
    PPO at two or more KL coefficients, CORY runs with knowledge transfer, a control without it, every one over the
    same seeds (two or more where the report tests claims: the rule pairs them by seed). One ConfigError naming the
    setting otherwise."""
    if rule is None:
        return
    where = "report.mechanism"
    if rule.group not in jobs:
        raise ConfigError(f"{where}.group: no experiment group {rule.group!r} (known: {', '.join(jobs)})")
    by_run: dict[str, list] = {}
    for job in jobs[rule.group]:
        by_run.setdefault(job.run, []).append(job)
    named = {"frontier": list(rule.frontier), "cory": list(rule.cory),
             "control": [rule.control] if rule.control else []}
    for setting, names in named.items():
        for name in names:
            if name not in by_run:
                raise ConfigError(f"{where}.{setting}: group {rule.group!r} has no run {name!r} (it has "
                                  f"{', '.join(by_run)})")
            train = by_run[name][0].train
            agents, transfer = train.cory.n_agents, train.cory.knowledge_transfer
            wanted = {"frontier": (agents == 1, "single-agent PPO (train.cory.n_agents 1)"),
                      "cory": (agents == 2 and transfer, "CORY with knowledge transfer (train.cory.knowledge_transfer)"),
                      "control": (agents == 2 and not transfer, "CORY without knowledge transfer "
                                  "(train.cory.knowledge_transfer false)")}[setting]
            if not wanted[0]:
                raise ConfigError(f"{where}.{setting}: run {rule.group}/{name} must be {wanted[1]}")
    etas = {name: by_run[name][0].train.ppo.init_kl_coef for name in rule.frontier}
    if len(set(etas.values())) < 2:
        raise ConfigError(f"{where}.frontier: runs {', '.join(etas)} train at one KL coefficient "
                          f"(train.ppo.init_kl_coef {next(iter(etas.values())):g}); PPO's frontier needs two or more")
    seeds = {name: sorted(job.seed for job in by_run[name]) for names in named.values() for name in names}
    if len({tuple(s) for s in seeds.values()}) > 1:
        raise ConfigError(f"{where}: its runs do not share seeds ({'; '.join(f'{n} {s}' for n, s in seeds.items())}): "
                          "the rule pairs them by seed")
    n = len(next(iter(seeds.values())))
    if test_claims and n < 2:
        raise ConfigError(f"{where}: its runs train {n} seed; the rule pairs runs by seed and needs two or more "
                          f"(experiments.{rule.group}.seeds)")


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
    phase_seconds: dict[int, dict[str, float]] = field(default_factory=dict)
    """seed -> its process's wall time by phase (summary.json; seeds written before it was recorded are left out)."""
    samples_by_seed: dict[int, list[dict]] = field(default_factory=dict)
    """seed -> its samples.jsonl rows (`samples` is the first seed's)."""
    device: str = ""
    """The device the first seed trained on (provenance.json; "" where it is not recorded)."""
    model: str = ""
    """The base model the first seed started from, as the train stage named it (a folder of the profile's models, or
    a hub name; provenance.json; "" where it is not recorded)."""

    @property
    def seeds(self) -> list[int]:
        return sorted(self.histories)

    def curves(self, key: str) -> dict[int, np.ndarray]:
        """seed -> the metric over iterations; a clear error if history.csv lacks the column."""
        out = {}
        for seed, frame in self.histories.items():
            if key not in frame:
                raise ValueError(f"{self.name}/seed{seed}/history.csv has no column {key!r} (see cory/rl/metrics.py)")
            out[seed] = frame[key].to_numpy(float)
        return out

    def per_seed(self, key: str, statistic: Callable[[np.ndarray], float]) -> dict[int, float]:
        return {seed: float(statistic(y)) for seed, y in self.curves(key).items()}


def load_run(run_dir: Path, seeds: list[int] | None = None) -> Run:
    """A run folder with its seed<k>/ subfolders: those of `seeds`, or every one found if None."""
    import pandas as pd

    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: run folder not found (did the train stage run it?)")
    if seeds is None:
        seeds = sorted(int(p.name[4:]) for p in run_dir.glob("seed*") if p.name[4:].isdigit())
        if not seeds:
            raise FileNotFoundError(f"{run_dir}: no seed<k>/ folders")
    histories, wall, memory, phases, config, samples, device, model = {}, {}, {}, {}, {}, {}, "", ""
    for seed in seeds:
        folder = run_dir / f"seed{seed}"
        for name in ("history.csv", "summary.json", "config.json", "samples.jsonl"):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder / name}: not found (did the train stage finish this seed?)")
        histories[seed] = pd.read_csv(folder / "history.csv").sort_values("iteration").reset_index(drop=True)
        summary = read_json(folder / "summary.json")
        wall[seed] = float(summary.get("wall_time_s", math.nan))
        memory[seed] = float(summary.get("peak_gpu_memory_gib") or math.nan)
        if summary.get("phase_seconds"):
            phases[seed] = {name: float(seconds) for name, seconds in summary["phase_seconds"].items()}
        samples[seed] = read_jsonl(folder / "samples.jsonl")
        if not config:  # seeds differ only in `seed`: the first one's config stands for the run
            config = read_json(folder / "config.json")
            if (folder / "provenance.json").is_file():
                provenance = read_json(folder / "provenance.json")
                device, model = str(provenance.get("device", "")), str(provenance.get("model") or "")
    name = "/".join(run_dir.parts[-2:])
    return Run(name, histories, config, samples[seeds[0]], wall, memory, phases, samples, device, model)


def _group_dir(runs_dir: Path, group: str) -> Path:
    path = runs_dir / group
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: experiment group folder not found (the train stage writes it for {group!r})")
    return path


@dataclass
class Sweep:
    """One task's KL-coefficient sweep (Fig. 2c): PPO and CORY at each fixed eta of its group's sweep_eta."""

    group: str
    """The experiment group that ran it (runs/<group>/)."""
    runs: dict[str, dict[float, Run]]
    """"ppo" / "cory" -> eta -> Run (folders ppo_eta<e>, cory_eta<e>)."""

    @property
    def seeds(self) -> list[int]:
        """The seeds every run of the sweep has."""
        return sorted(set.intersection(*(set(run.seeds) for by_eta in self.runs.values() for run in by_eta.values())))


@dataclass
class Inputs:
    """Everything the report reads, loaded and checked up front."""

    runs: dict[str, dict[str, Run]]
    """group -> run name -> Run (the EXPECTED_RUNS, and the runs of each further IMDB group: `expected_runs`)."""
    sweeps: dict[str, Sweep]
    """task -> its KL-coefficient sweep, for the tasks of SWEEP_TASKS that params sweep (Fig. 2c)."""
    passk: dict
    base_models: dict[str, dict]
    reward_model: dict
    base_samples: dict[str, list[dict]]
    timings: list[dict] = field(default_factory=list)

    def model_of(self, group: str) -> str:
        """How the report names a group's base model (`group_model`)."""
        return group_model(group, self.runs.get(group, {}), self.base_models)


def group_model(group: str, runs: dict[str, Run], base_models: dict[str, dict]) -> str:
    """How the report names a group's base model: that of its `ppo` run (else its first run), with its size and
    whether it was trained here or pretrained, from the base model stage's metrics (`base_models`: name -> its
    metrics): "imdb_small (30M, from scratch)"; the group's name where its runs did not record their model."""
    run = runs.get("ppo") or next(iter(runs.values()), None)
    if run is None or not run.model:
        return group
    name = Path(run.model).name
    metrics = base_models.get(name)
    if metrics is None:
        return name  # a hub model or a folder of one's own: its name says what it is
    size = f"{metrics['params'] / 1e6:.3g}M, " if isinstance(metrics.get("params"), (int, float)) else ""
    return f"{name} ({size}{'from scratch' if 'epochs' in metrics else 'pretrained'})"


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (did its stage run?)")
    return read_json(path)


def _json_folder(path: Path) -> dict[str, dict]:
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: folder not found (did its stage run?)")
    return {p.stem: read_json(p) for p in sorted(path.glob("*.json"))}


def expected_runs(group: str, experiments: dict[str, ExperimentConfig], mechanism=None) -> tuple[str, ...]:
    """The runs the report reads of a group: for an IMDB group (`imdb`, or another of report.imdb_groups), those of
    IMDB_RUNS its params list (ppo and cory at least: `check_imdb_group`); for `math`, EXPECTED_RUNS'; and the runs
    report.mechanism (`mechanism`) names, where it is this group's rule."""
    exp = experiments.get(group)
    listed = exp.runs if exp is not None else {}
    names = EXPECTED_RUNS["math"] if group == "math" else tuple(n for n in IMDB_RUNS if n in listed or (
        exp is None and n in EXPECTED_RUNS["imdb"]))
    if mechanism is not None and mechanism.group == group:
        names += (*mechanism.frontier, *mechanism.cory, *((mechanism.control,) if mechanism.control else ()))
    return tuple(dict.fromkeys(names))


def load_inputs(outputs: Path, experiments: dict[str, ExperimentConfig], seeds: list[int] | None = None,
                imdb_groups: tuple[str, ...] = (), mechanism=None) -> Inputs:
    """Read outputs/<profile>/ (see the module docstring). `experiments` (params) say which groups sweep a task's KL
    coefficient and which seeds a group with its own `seeds` ran; `seeds` (the top-level seeds) are every other
    group's, None taking every seed folder of each run. `imdb_groups` (report.imdb_groups) adds the IMDB groups the
    claims are made for besides `imdb`, with the runs of IMDB_RUNS each has; `mechanism` (report.mechanism) the runs
    its rule compares."""
    runs_dir = outputs / "runs"

    def seeds_of(group: str) -> list[int] | None:  # validation made a group's own seeds a subset of `seeds`
        exp = experiments.get(group)
        return exp.seeds if exp is not None and exp.seeds is not None else seeds

    runs = {}
    groups = (*EXPECTED_RUNS, *imdb_groups, *((mechanism.group,) if mechanism is not None else ()))
    for group in dict.fromkeys(groups):
        folder = _group_dir(runs_dir, group)
        runs[group] = {name: load_run(folder / name, seeds_of(group))
                       for name in expected_runs(group, experiments, mechanism)}
    sweeps = {}
    for task, group in sweep_groups(experiments).items():
        if task not in SWEEP_TASKS:
            continue  # no figure or claim reads it (pipeline.params rejects such params)
        folder = _group_dir(runs_dir, group)
        sweeps[task] = Sweep(group, {name: {eta: load_run(folder / f"{name}_{eta_name(eta)}", seeds_of(group))
                                            for eta in experiments[group].sweep_eta} for name in SWEEP_RUNS})
    passk = _read_json(outputs / "eval" / "passk.json")
    missing = [m for m in PASSK_MODELS if m not in passk]
    if missing:
        raise ValueError(f"{outputs / 'eval' / 'passk.json'}: no results for {', '.join(missing)} (evaluation.models)")
    timing_dir = outputs / "metrics" / "timing"
    timings = list(_json_folder(timing_dir).values()) if timing_dir.is_dir() else []
    return Inputs(
        runs=runs,
        sweeps=sweeps,
        passk=passk,
        base_models=_json_folder(outputs / "metrics" / "base_models"),
        reward_model=_read_json(outputs / "metrics" / "reward_model.json"),
        base_samples=_json_folder(outputs / "samples" / "base_models"),
        timings=timings,
    )
