"""REPORT.md and METRICS.md as markdown: the first screen (cory.report.front), the setup and time tables, each claim
with its numbers (cory.report.claims_text); samples.md is cory.report.samples'. Every number is computed from the run
files; every verdict comes from a written rule (cory.report.claims), never from hand-written text.

Conventions: a run's *final* value of a metric is the mean over its last `last_n` iterations, per seed; the tables
give mean +/- std over seeds (population std, ddof 0, as eval/passk.json), the std to 2 significant digits and the
mean and per-seed values to the same decimal place (`mean_std`); the figures draw the mean over seeds with a band
from the lowest to the highest seed, which, unlike mean +/- std, never leaves the range a quantity can take (KL >= 0).
"CORY" in a claim means each of LLM1 and LLM2, so both copies must show the effect.
"""

from __future__ import annotations

import json

import numpy as np

from cory.report.cells import _num, _seed_list, decimals, fixed, mean_std, table
from cory.report.claims import Claim
from cory.report.claims_text import NOT_TESTED_LINE, claim_markdown, rerun_markdown, rerun_rows, summary_json
from cory.report.front import answer_lines, claims_table, groups_markdown, methods_markdown, run_markdown
from cory.report.samples import samples_markdown

from cory.report.config import ReportConfig
from cory.report.results import SWEEP_TASKS, Inputs, Run
from cory.rl.metrics import AGENT_METRICS, EVAL_METRICS, IDENTITIES, IDENTITY_ONLY_METRICS, ROLES, RUN_METRICS
from cory.schema import dotted_leaves

__all__ = ["claim_markdown", "decimals", "fixed", "glossary_markdown", "mean_std", "report_markdown", "rerun_rows",
           "samples_markdown", "summary_json", "table", "time_table"]


def time_table(timings: list[dict]) -> list[str]:
    """Each stage's seconds, minutes and share of the stages' total, in the order they ran where they recorded their
    clock times (the report stage left out: it is still running when it writes this), with its peak host and GPU
    memory (the stage process's own: a worker's GPU memory is in the runs' table). Where every stage recorded its
    clock times, two more rows: the time outside the stages' clocks (DVC's hashing and caching, each stage's process
    start and imports; split in two where the stages also recorded when their processes started, and then counted
    from the first stage's process start, whose imports are the first stage's cost too) and the span from the first
    start to the last end."""
    timings = [t for t in timings if t.get("stage") != "report"]
    if not timings:
        return ["(no stage timing files were found)"]
    total = sum(float(t["seconds"]) for t in timings)
    clocked = all(t.get("started_at") is not None and t.get("finished_at") is not None for t in timings)
    if clocked:
        timings = sorted(timings, key=lambda t: t["started_at"])  # in the order they ran
    processes = clocked and all(t.get("process_started_at") is not None for t in timings)
    first_start = min(t["process_started_at" if processes else "started_at"] for t in timings) if clocked else 0.0
    span = max(t["finished_at"] for t in timings) - first_start if clocked else total
    memory = lambda t, key: f"{t[key]:.1f}" if t.get(key) is not None else "-"  # noqa: E731
    row = lambda name, seconds, *rest: [name, f"{seconds:.1f}", f"{seconds / 60:.2f}", f"{seconds / span:.0%}", *rest]  # noqa: E731
    rows = [row(t["stage"], t["seconds"], memory(t, "peak_rss_gib"), memory(t, "peak_gpu_gib")) for t in timings]
    if processes:
        # each stage's process before its timer started; the rest is DVC's (hashing and caching outputs, checking the
        # next stage) and each process's exit
        start_up = sum(t["started_at"] - t["process_started_at"] for t in timings)
        rows += [row("*before and between the stages*", span - total),
                 row("&nbsp;&nbsp;*of which the stage processes' start (Python, imports, checks)*", start_up),
                 row("&nbsp;&nbsp;*of which DVC and the processes' exit*", span - total - start_up),
                 row("**first process start to last end**", span)]
    elif clocked:
        rows += [row("*between the stages*", span - total), row("**first start to last end**", span)]
    else:
        rows += [row("**total**", total)]
    return table(["stage", "seconds", "minutes", "share", "peak host memory (GiB)",
                   "peak GPU memory of the stage's own process (GiB)"], rows)


def setup_markdown(inputs: Inputs) -> list[str]:
    """Models, reward model, hyperparameters (from the runs' config.json) and the time every stage took."""
    lines = ["## Setup", "", "### Base models (outputs/<profile>/metrics/base_models/)", ""]
    keys = ("params", "param_ratio", "val_perplexity", "train_tokens", "epochs", "train_seconds", "peak_gpu_gib")
    rows = [[name, *(_num(metrics.get(k)) for k in keys)] for name, metrics in inputs.base_models.items()]
    lines += table(["model", *keys], rows)
    lines += ["", "### Reward model (metrics/reward_model.json)", ""]
    scalars = {k: v for k, v in inputs.reward_model.items() if isinstance(v, (int, float))}
    lines += table(["metric", "value"], [[k, _num(v)] for k, v in scalars.items()])
    configs = {f"{g}/{name}": dotted_leaves(run.config) for g, runs in inputs.runs.items() for name, run in runs.items()}
    keys = [k for k in next(iter(configs.values())) if k != "seed"]
    shared = [k for k in keys if len({json.dumps(c.get(k)) for c in configs.values()}) == 1]
    varying = [k for k in keys if k not in shared]
    lines += ["", "### Hyperparameters (each run's config.json)", "", "Shared by every IMDB and math run:", ""]
    lines += table(["setting", "value"], [[k, json.dumps(configs[next(iter(configs))][k])] for k in shared])
    lines += ["", "Different between runs:", ""]
    lines += table(["setting", *configs], [[k, *(json.dumps(c.get(k)) for c in configs.values())] for k in varying])
    lines += [""]
    for task in SWEEP_TASKS:
        sweep = inputs.sweeps.get(task)
        if sweep is None:
            lines += [f"No Pareto sweep of task `{task}`: no experiment group has task {task} and a sweep_eta.", ""]
            continue
        etas = sorted(sweep.runs["ppo"])
        adaptive = dotted_leaves(sweep.runs["ppo"][etas[0]].config).get("ppo.adaptive_kl")
        lines += [f"The Pareto sweep of task `{task}` (group `{sweep.group}`, seeds {_seed_list(sweep.seeds)}) repeats "
                  f"PPO and CORY at η = ppo.init_kl_coef in {{{', '.join(f'{e:g}' for e in etas)}}} "
                  f"(ppo.adaptive_kl = {json.dumps(adaptive)}).", ""]
    lines += ["### Time", "", "Stage wall time (outputs/<profile>/metrics/timing/; the report stage not included; "
              "DVC's own hashing and caching and each stage's process start are outside every stage's time, and in the row "
              "'before and between the stages' where the stages recorded their clock times and their processes' "
              "starts; DVC's own start before the first stage's process and its end after the last are in no row. "
              "`base_models`, `train` and, on a GPU, `evaluate` run their models in worker processes: "
              "the base models' peak GPU memory is in their table above, the runs' in the table below, the "
              "evaluation workers' is not recorded):", ""]
    lines += time_table(inputs.timings)
    lines += ["", "Wall time and peak GPU memory of each training run (summary.json; the train stage runs "
              "runtime.workers of them at once on each GPU it sees), and where the time went (its `phase_seconds`, "
              "mean over the seeds that recorded it: the training iterations; LLM1's logged samples and probes; the "
              "resume checkpoints; the rest: loading the models, logging, saving):", ""]
    swept = [by_eta for sweep in inputs.sweeps.values() for by_eta in sweep.runs.values()]
    every_run = [run for group in (*inputs.runs.values(), *swept) for run in group.values()]
    rows = [[run.name, mean_std(list(run.wall_time_s.values()))[0], phase_split(run),
             mean_std(list(run.peak_gpu_memory_gib.values()))[0]] for run in every_run]
    header = ["run", "seconds", "iterations / samples and probes / checkpoints / rest (s)", "peak GPU memory (GiB)"]
    return lines + table(header, rows) + [""]


PHASE_COLUMNS = {"iterations": ("iterations",), "samples and probes": ("samples", "probes"),
                 "checkpoints": ("checkpoints",)}
"""The report's split of a run's phase_seconds (cory.runs.run.run_training); every other phase is "rest"."""


def phase_split(run: Run) -> str:
    """"iterations / samples and probes / checkpoints / rest" in seconds, each the mean over the seeds that recorded
    phases; "-" for a run without any (written before they were recorded)."""
    if not run.phase_seconds:
        return "-"
    listed = {name for names in PHASE_COLUMNS.values() for name in names}

    def mean(keep) -> float:  # over the seeds, of the phases `keep` selects
        return float(np.mean([sum(v for name, v in phases.items() if keep(name)) for phases in run.phase_seconds.values()]))

    parts = [mean(lambda name, names=names: name in names) for names in PHASE_COLUMNS.values()]
    return " / ".join(f"{x:.1f}" for x in (*parts, mean(lambda name: name not in listed)))


def deviations_markdown(cfg: ReportConfig) -> list[str]:
    """The profile's own account of where it departs from the paper's settings (params report.deviations)."""
    if not cfg.deviations:
        return []
    lines = ["### Changes from the paper's settings (params `report.deviations`)", "",
             "Each applies to PPO and CORY alike unless it says otherwise.", ""]
    return lines + table(["setting", "why"], [[f"`{k}`", v] for k, v in cfg.deviations.items()]) + [""]


def title_line(inputs: Inputs, cfg: ReportConfig, profile: str) -> str:
    """REPORT.md's first line: the profile, and for a profile that tests no claim that it is a check of the
    pipeline, on the device its runs used."""
    title = f"# CORY reproduction report (profile `{profile}`)"
    if cfg.test_claims:
        return title
    devices = sorted({run.device for runs in inputs.runs.values() for run in runs.values() if run.device})
    where = f" on {', '.join(devices).upper() if devices == ['cpu'] else ', '.join(devices)}" if devices else ""
    return f"{title}: a check that the pipeline runs{where}; it tests no claim"


def report_markdown(
    inputs: Inputs, claims: list[Claim], cfg: ReportConfig, profile: str, captions: dict[str, str],
    rerun: tuple[str, dict | None] | None = None,
) -> str:
    """REPORT.md: its first screen (the answer, the claims table), how claims are judged, this run, what each group
    can test, the comparison with a rerun (`rerun_markdown`), the setup, every claim and the figures. Generated
    text only."""
    lines = [
        title_line(inputs, cfg, profile), "", *([NOT_TESTED_LINE, ""] if not cfg.test_claims else []),
        *answer_lines(claims, inputs, cfg), "",
        f"Generated by `python -m pipeline.report` from outputs/{profile}/ (rules: cory/report/, docs/claims.md); "
        "metric definitions: [METRICS.md](METRICS.md); generations before and after training: "
        "[samples.md](samples.md).", "",
        "## Claims", "", *claims_table(claims, cfg), "",
        *methods_markdown(cfg), *run_markdown(inputs, cfg), *groups_markdown(inputs, claims, cfg),
        *rerun_markdown(summary_json(claims), rerun), *setup_markdown(inputs), *deviations_markdown(cfg),
        "## Claim by claim", "",
    ]
    for i, claim in enumerate(claims, 1):
        lines += claim_markdown(i, claim)
    lines += ["## Figures", ""]
    for name in sorted(captions):  # paper order: 2c, 3, 4, 5, 6
        lines += [f"![{name}]({name}.png)", "", f"*{captions[name]}*", ""]
    return "\n".join(lines)


def glossary_markdown() -> str:
    """The glossary of cory.rl.metrics as a markdown document (the report stage writes it to METRICS.md)."""
    lines = ["# Metrics glossary", "",
             "Generated from `cory/rl/metrics.py`; every key in `history.csv` and in MLflow is defined here.", "",
             "## Prefixes", ""]
    lines += table(["prefix", "meaning"], [[f"`{p}/`", who] for p, who in {**IDENTITIES, **ROLES}.items()])
    lines += ["", "## Per-agent metrics", ""]
    lines += table(["key", "definition"],
                   [[f"`{{llm1,llm2,pioneer,observer}}/{name}`", text] for name, text in AGENT_METRICS.items()]
                   + [[f"`{{llm1,llm2}}/{name}`", text] for name, text in IDENTITY_ONLY_METRICS.items()])
    lines += ["", "## Per-iteration metrics", ""]
    lines += table(["key", "definition"], [[f"`{key}`", text] for key, text in RUN_METRICS.items()])
    lines += ["", "## Evaluation", ""]
    lines += table(["key", "definition"], [[f"`{key}`", text] for key, text in EVAL_METRICS.items()])
    return "\n".join(lines + [""])
