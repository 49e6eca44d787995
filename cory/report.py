"""The reproduction report, reports/<profile>/: the paper's figures, REPORT.md, samples.md, METRICS.md, claims.json.

`write_report` loads every run (cory.results), tests each claim of the paper (cory.claims), draws the figures
(cory.plots) and writes the markdown. Every number in the report is computed from the run files; every verdict comes
from a written rule applied by `cory.claims.verdict`, never from hand-written text.

Conventions: a run's *final* value of a metric is the mean over its last `last_n` iterations, per seed; the report
gives mean +/- std over seeds (population std, ddof 0, as eval/passk.json). "CORY" in a claim means each of LLM1 and
LLM2, so both copies must show the effect.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cory import plots
from cory.roles import TABLE3_QUERIES
from cory.claims import (
    HELD,
    MIXED,
    NOT_HELD,
    NOT_MEASURABLE,
    Claim,
    build_claims,
    final_value,
    partner_coef,
    smooth,
)
from cory.config import check, section_path
from cory.metrics import glossary_markdown
from cory.results import PARETO_GROUP, Inputs, Run, load_inputs

"""The IMDB prompts of the paper's qualitative Table 3; samples.md shows them first where a run logged them."""


@dataclass
class ReportConfig:
    """The report stage (params `report`): how final values, stability and the verdict rules are computed."""

    last_n: int = 10
    """Final value of a metric = mean over the last last_n iterations of a run (capped at the run's length)."""
    stability_window: int = 10
    """Centred rolling mean (iterations) applied before drawdowns, peaks and curve gaps, to look past batch noise."""
    tolerance: float = 0.2
    """"Similar" / "nearly coincide": a difference of at most this fraction of the curve's scale (see each rule)."""
    kl_ratio: float = 2.0
    """The paper's "PPO's final KL is more than 2x CORY's"."""
    decline: float = 0.1
    """"Peaks then declines": the final value lies this share of the peak's gain (over iteration 0) below the peak."""
    samples: int = 3
    """Generations per table in samples.md."""
    plot_smoothing: int = 1
    """Centred rolling mean (iterations) of each seed's curve in the figures; 1 draws the raw curves."""
    deviations: dict[str, str] = field(default_factory=dict)
    """Settings that differ from the paper's (Tables 1-2) -> why; REPORT.md lists them. Kept in the profile, beside
    the settings they explain."""

    def __post_init__(self) -> None:
        path = section_path("report")
        for name in ("last_n", "stability_window", "plot_smoothing"):
            check(getattr(self, name) >= 1, f"{path}.{name}", f"must be >= 1, got {getattr(self, name)}")
        check(self.tolerance > 0, f"{path}.tolerance", f"must be > 0, got {self.tolerance}")
        check(self.kl_ratio > 0, f"{path}.kl_ratio", f"must be > 0, got {self.kl_ratio}")
        check(0 < self.decline < 1, f"{path}.decline", f"must be in (0, 1), got {self.decline}")
        check(self.samples >= 0, f"{path}.samples", f"must be >= 0, got {self.samples}")


# --------------------------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------------------------

TASK_REWARD = {"imdb": "task reward (sentiment logit)", "math": "task reward (share correct)"}
KL_LABEL = r"KL$(\pi_\theta \,\|\, \pi_0)$, summed over the response"
COMBINED_LABEL = r"combined reward $r - \eta\,$KL"


def series(run: Run, key: str, label: str, smoothing: int = 1) -> plots.Series:
    """Mean and std over seeds at each iteration every seed reached (a crashed seed shortens the curve)."""
    frame = pd.DataFrame({s: pd.Series(smooth(y, smoothing)) for s, y in run.curves(key).items()}).dropna()
    return plots.Series(label, frame.index.to_numpy(), frame.mean(axis=1).to_numpy(),
                        frame.std(axis=1, ddof=0).to_numpy(), n_seeds=frame.shape[1])


def _panels(curves: list[tuple[Run, str, str]], metrics: list[tuple[str, str, str]], smoothing: int):
    """One Panel per (metric, title, y label), each with a Series per (run, identity/role prefix, label)."""
    return [plots.Panel(title, ylabel, [series(run, f"{who}/{metric}", label, smoothing) for run, who, label in curves])
            for metric, title, ylabel in metrics]


def _frontier(runs: dict[float, Run], who: str, last_n: int) -> list[plots.FrontierPoint]:
    """One point per eta: final task reward and KL, mean and std over seeds."""
    points = []
    for eta, run in runs.items():
        reward = list(run.per_seed(f"{who}/task_reward", lambda y: final_value(y, last_n)).values())
        kl = list(run.per_seed(f"{who}/kl", lambda y: final_value(y, last_n)).values())
        points.append(plots.FrontierPoint(eta, np.mean(reward), np.std(reward), np.mean(kl), np.std(kl)))
    return points


def _three_panels(task: str) -> list[tuple[str, str, str]]:
    return [("task_reward", "(a) task reward", TASK_REWARD[task]), ("kl", "(b) KL divergence", KL_LABEL),
            ("combined_reward", "(c) combined reward", COMBINED_LABEL)]


def draw_figures(inputs: Inputs, cfg: ReportConfig, out: Path) -> dict[str, Path]:
    """Every figure of the report as out/<name>.png; returns name -> path."""
    imdb, maths, k = inputs.runs["imdb"], inputs.runs["math"], cfg.plot_smoothing
    n_seeds = len(imdb["ppo"].seeds)
    spread = f"mean ± std over {n_seeds} seeds" if n_seeds > 1 else "1 seed"
    main_imdb = [(imdb["ppo"], "llm1", "PPO"), (imdb["ppo_2x"], "llm1", "PPO-2x"),
                 (imdb["cory"], "llm1", "CORY-LLM1"), (imdb["cory"], "llm2", "CORY-LLM2")]
    figures = {}
    figures["fig3_imdb"] = plots.curves_figure(
        _panels(main_imdb, _three_panels("imdb"), k),
        f"Fig. 3 (reproduced): IMDB, PPO vs PPO-2x vs CORY ({spread})", out / "fig3_imdb.png")
    figures["fig4_math"] = plots.curves_figure(
        _panels([(maths["ppo"], "llm1", "PPO"), (maths["cory"], "llm1", "CORY-LLM1"),
                 (maths["cory"], "llm2", "CORY-LLM2")], _three_panels("math"), k),
        f"Fig. 4 (reproduced): math word problems, PPO vs CORY ({spread})", out / "fig4_math.png")
    ablations = [(imdb["cory"], "llm1", "CORY-LLM1"), (imdb["cory_no_kt"], "llm1", "CORY w/o KT (LLM1)"),
                 (imdb["cory_no_rex"], "pioneer", "CORY w/o REx, pioneer"),
                 (imdb["cory_no_rex"], "observer", "CORY w/o REx, observer"), (imdb["ppo"], "llm1", "PPO")]
    figures["fig6_ablations"] = plots.curves_figure(
        _panels(ablations, _three_panels("imdb")[:2], k),
        f"Fig. 6 (reproduced): IMDB ablations of knowledge transfer (KT) and role exchange (REx) ({spread})",
        out / "fig6_ablations.png")
    coop, comp = imdb["cory"], imdb["cory_competitive"]
    figures["fig_coop_vs_comp"] = plots.curves_figure(
        _panels([(coop, "llm1", f"LLM1, cooperative (c = {partner_coef(coop):g})"),
                 (comp, "llm1", f"LLM1, competitive (c = {partner_coef(comp):g})")], _three_panels("imdb")[:2], k),
        f"Cooperative vs competitive partner reward $r_{{self}} + c\\,r_{{partner}}$, IMDB ({spread})",
        out / "fig_coop_vs_comp.png")
    figures["fig_diversity"] = plots.curves_figure(
        _panels(main_imdb, [("distinct_2", "(a) distinct-2 of the responses", "distinct bigrams / bigrams"),
                            ("entropy", "(b) policy entropy", "entropy per token (nats)"),
                            ("response_length", "(c) response length", "tokens")], k),
        f"Training stability and diversity, IMDB ({spread})", out / "fig_diversity.png")
    frontiers = {"PPO": _frontier(inputs.pareto["ppo"], "llm1", cfg.last_n),
                 "CORY-LLM1": _frontier(inputs.pareto["cory"], "llm1", cfg.last_n),
                 "CORY-LLM2": _frontier(inputs.pareto["cory"], "llm2", cfg.last_n)}
    figures["fig2c_pareto"] = plots.pareto_figure(
        frontiers, f"Fig. 2(c) (reproduced): PPO vs CORY over the KL coefficient η\n"
        f"final values, {spread}", out / "fig2c_pareto.png", annotated=("PPO", "CORY-LLM1"))
    passk = []
    for model, label in (("base", "base"), ("ppo", "PPO"), ("cory_llm1", "CORY-LLM1"), ("cory_llm2", "CORY-LLM2")):
        result = inputs.passk[model]
        ks = sorted(result["mean"], key=int)
        passk.append(plots.Series(label, np.array([int(x) for x in ks]), np.array([result["mean"][x] for x in ks]),
                                  np.array([result["std"][x] for x in ks]), n_seeds=len(result["seeds"])))
    figures["fig5_passk"] = plots.passk_figure(
        passk, "Fig. 5 (reproduced): pass@k on the held-out math problems", out / "fig5_passk.png")
    return figures


# --------------------------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------------------------


def _num(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,}" if isinstance(x, int) else f"{x:.4g}"


def _cell(text) -> str:
    """Text safe in one markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", "⏎ ").strip() or " "


def _spread(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{_num(values[0])} (1 seed)"
    mean, std = float(np.mean(values)), float(np.std(values))
    std = 0.0 if std <= 1e-9 * max(1.0, abs(mean)) else std  # float round-off of equal values is no spread
    return f"{_num(mean)} ± {_num(std)} ({len(values)} seeds)"


def _table(header: list[str], rows: list[list]) -> list[str]:
    rows = [f"| {' | '.join(_cell(c) for c in row)} |" for row in rows]
    return [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}", *rows]


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def setup_markdown(inputs: Inputs) -> list[str]:
    """Models, reward model, hyperparameters (from the runs' config.json) and the time every stage took."""
    lines = ["## Setup", "", "### Base models (outputs/<profile>/metrics/base_models/)", ""]
    keys = ("params", "param_ratio", "val_perplexity", "train_tokens", "epochs", "train_seconds")
    rows = [[name, *(_num(metrics.get(k)) for k in keys)] for name, metrics in inputs.base_models.items()]
    lines += _table(["model", *keys], rows)
    lines += ["", "### Reward model (metrics/reward_model.json)", ""]
    scalars = {k: v for k, v in inputs.reward_model.items() if isinstance(v, (int, float))}
    lines += _table(["metric", "value"], [[k, _num(v)] for k, v in scalars.items()])
    configs = {f"{g}/{name}": _flatten(run.config) for g, runs in inputs.runs.items() for name, run in runs.items()}
    keys = [k for k in next(iter(configs.values())) if k != "seed"]
    shared = [k for k in keys if len({json.dumps(c.get(k)) for c in configs.values()}) == 1]
    varying = [k for k in keys if k not in shared]
    lines += ["", "### Hyperparameters (each run's config.json)", "", "Shared by every IMDB and math run:", ""]
    lines += _table(["setting", "value"], [[k, json.dumps(configs[next(iter(configs))][k])] for k in shared])
    lines += ["", "Different between runs:", ""]
    lines += _table(["setting", *configs], [[k, *(json.dumps(c.get(k)) for c in configs.values())] for k in varying])
    etas = sorted(inputs.pareto["ppo"])
    adaptive = _flatten(inputs.pareto["ppo"][etas[0]].config).get("ppo.adaptive_kl")
    lines += ["", f"The Pareto sweep (group `{PARETO_GROUP}`) repeats PPO and CORY at η = ppo.init_kl_coef in "
              f"{{{', '.join(f'{e:g}' for e in etas)}}} (ppo.adaptive_kl = {json.dumps(adaptive)}).", ""]
    lines += ["### Time", "", "Stage wall time (outputs/<profile>/metrics/timing/; the report stage not included):", ""]
    timings = [t for t in inputs.timings if t.get("stage") != "report"]
    if timings:
        total = sum(float(t["seconds"]) for t in timings)
        memory = lambda t, key: f"{t[key]:.1f}" if t.get(key) is not None else "-"  # noqa: E731
        lines += _table(["stage", "seconds", "minutes", "peak host memory (GiB)", "peak GPU memory (GiB)"],
                        [[t["stage"], f"{t['seconds']:.1f}", f"{t['seconds'] / 60:.2f}", memory(t, "peak_rss_gib"),
                          memory(t, "peak_gpu_gib")] for t in timings]
                        + [["**total**", f"{total:.1f}", f"{total / 60:.2f}"]])
    else:
        lines += ["(no stage timing files were found)"]
    lines += ["", "Wall time and peak GPU memory of each training run (summary.json; the train stage runs "
              "runtime.workers of them at once on one GPU):", ""]
    every_run = [run for group in (*inputs.runs.values(), *inputs.pareto.values()) for run in group.values()]
    rows = [[run.name, _spread(list(run.wall_time_s.values())), _spread(list(run.peak_gpu_memory_gib.values()))]
            for run in every_run]
    return lines + _table(["run", "seconds", "peak GPU memory (GiB)"], rows) + [""]


def deviations_markdown(cfg: ReportConfig) -> list[str]:
    """The profile's own account of where it departs from the paper's settings (params report.deviations)."""
    if not cfg.deviations:
        return []
    lines = ["### Changes from the paper's settings (params `report.deviations`)", "",
             "Each applies to PPO and CORY alike unless it says otherwise.", ""]
    return lines + _table(["setting", "why"], [[f"`{k}`", v] for k, v in cfg.deviations.items()]) + [""]


VERDICT_RULE = (
    f"Each claim has a rule on per-seed quantities. The rule is applied to every seed and to the mean over seeds: "
    f"**{HELD}** = it holds on the means and on every seed; **{NOT_HELD}** = it holds on neither the means nor any "
    f"seed; **{MIXED}** = anything in between; **{NOT_MEASURABLE}** = a quantity could not be computed (e.g. a slope "
    "over a run too short to have one). With one seed, held/did not hold say only what that seed did."
)


def claim_markdown(number: int, claim: Claim) -> list[str]:
    """The paper's statement, the rule, the verdict and every quantity (mean +/- std and per seed)."""
    holds = claim.holds()
    agreeing = [str(s) for s, ok in holds.items() if ok]
    lines = [f"### {number}. {claim.paper}", "", f"Figure: [{claim.figure}]({claim.figure})", "",
             f"- **Rule:** {claim.rule}",
             f"- **Verdict: {claim.verdict}** (the rule holds on {len(agreeing)}/{len(holds)} seeds"
             + (f": {', '.join(agreeing)}" if agreeing else "") + ")", ""]
    rows = []
    for label, values in claim.quantities.items():
        # None: a model trained once (the base model), the same value for every seed
        seeds = [s for s in claim.seeds if s in values] or [s for s in (None,) if s in values]
        per_seed = ", ".join(f"{'-' if s is None else s}: {_num(float(values[s]))}" for s in seeds)
        rows.append([label, _spread([float(values[s]) for s in seeds]), per_seed])
    return lines + _table(["quantity", "mean ± std", "per seed"], rows) + [""]


def report_markdown(
    inputs: Inputs, claims: list[Claim], cfg: ReportConfig, profile: str, figures: dict[str, Path]
) -> str:
    seeds = inputs.runs["imdb"]["ppo"].seeds
    iterations = {name: len(next(iter(run.histories.values()))) for name, run in inputs.runs["imdb"].items()}
    lines = [
        f"# CORY reproduction report (profile `{profile}`)", "",
        f"Generated by `python -m pipeline.report` from outputs/{profile}/; every number and verdict below is computed "
        "from those files (rules: cory/claims.py). Do not edit by hand.", "",
        f"Seeds: {', '.join(map(str, seeds))}. IMDB runs have {max(iterations.values())} iterations. A run's *final* "
        f"value is the mean over its last {cfg.last_n} iterations; ± is the std over seeds (ddof 0). "
        "Metric definitions: [METRICS.md](METRICS.md); generations before and after training: "
        "[samples.md](samples.md).",
        "", "## Verdicts", "", VERDICT_RULE, "",
        *_table(["#", "claim (paper)", "figure", "verdict"],
                [[i, c.paper, f"[{c.figure}]({c.figure})", f"**{c.verdict}**"] for i, c in enumerate(claims, 1)]),
        "", *setup_markdown(inputs), *deviations_markdown(cfg), "## Claims", "",
    ]
    for i, claim in enumerate(claims, 1):
        lines += claim_markdown(i, claim)
    lines += ["## Figures", ""]
    lines += [f"![{name}]({figures[name].name})\n" for name in sorted(figures)]  # paper order: 2c, 3, 4, 5, 6
    return "\n".join(lines)


def _llm1_generation(row: dict) -> tuple[str, float, str]:
    """(response, score, role) of LLM1 in one samples.jsonl row, whichever role it played."""
    role = "pioneer" if row.get("pioneer_agent", "llm1") == "llm1" else "observer"
    return row[f"{role}_response"], row[f"{role}_score"], role


def _pick(rows: list[dict], n: int) -> list[dict]:
    """The paper's Table 3 snippets first (if a run logged them), then the rows in order."""
    first = [r for r in rows if r["query"].strip().startswith(TABLE3_QUERIES)]
    return (first + [r for r in rows if r not in first])[:n]


def samples_markdown(inputs: Inputs, cfg: ReportConfig) -> str:
    """The Table 3 analogue: LLM1's generations at the first iteration (the base model) and the last one."""
    lines = ["# Generations before and after RL fine-tuning (the paper's Table 3 analogue)", "",
             "Each run logs LLM1 used alone (pioneer prompt) on the same fixed queries before training (iteration -1: "
             "the base model) and after its last iteration; for IMDB these are the paper's Table 3 snippets.", ""]
    for name, rows in inputs.base_samples.items():
        lines += [f"## Base model `{name}` (samples/base_models/{name}.json)", ""]
        rows = [[row["prompt"], row["continuation"]] for row in rows[: cfg.samples]]
        lines += _table(["prompt", "continuation"], rows) + [""]
    for group, name in (("imdb", "ppo"), ("imdb", "cory"), ("math", "ppo"), ("math", "cory")):
        run = inputs.runs[group][name]
        seed = run.seeds[0]
        iterations = sorted({r["iteration"] for r in run.samples})
        lines += [f"## {run.name} (seed {seed}), LLM1", ""]
        table = []
        for it, when in ((iterations[0], "before"), (iterations[-1], "after")):
            for row in _pick([r for r in run.samples if r["iteration"] == it], cfg.samples):
                response, score, role = _llm1_generation(row)
                table.append([f"{when} (iteration {it})", role, row["query"], response, _num(float(score))])
        lines += _table(["when", "role", "query", "LLM1 response", "task reward"], table) + [""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------------
# The whole report
# --------------------------------------------------------------------------------------------------------------------


def write_report(
    outputs: Path, reports: Path, cfg: ReportConfig, seeds: list[int] | None, profile: str
) -> list[Claim]:
    """Read outputs/<profile>/ and write reports/<profile>/: the figures, REPORT.md, samples.md, METRICS.md and
    claims.json (each claim's verdict and mean quantities, for `dvc metrics`/diffs)."""
    inputs = load_inputs(outputs, seeds)
    claims = build_claims(inputs, cfg)  # every quantity is computed (and every missing column found) before drawing
    reports.mkdir(parents=True, exist_ok=True)
    figures = draw_figures(inputs, cfg, reports)
    (reports / "REPORT.md").write_text(report_markdown(inputs, claims, cfg, profile, figures))
    (reports / "samples.md").write_text(samples_markdown(inputs, cfg))
    (reports / "METRICS.md").write_text(glossary_markdown())
    # NaN is not JSON: None keeps the file readable by DVC.
    summary = {c.key: {"verdict": c.verdict, "means": {k: None if math.isnan(v) else v for k, v in c.means().items()}}
               for c in claims}
    (reports / "claims.json").write_text(json.dumps(summary, indent=2) + "\n")
    return claims
