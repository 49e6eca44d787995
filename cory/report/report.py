"""The reproduction report, reports/<profile>/: the paper's figures, REPORT.md, samples.md, METRICS.md, claims.json.

`write_report` loads every run (cory.results), tests each claim of the paper (cory.claims: effects with intervals
over seeds, cory.report.stats), draws the figures (cory.plots) and writes the markdown. Every number in the report is
computed from the run files; every verdict comes from a written rule applied to an effect's interval, never from
hand-written text; the paper's own numbers (cory.claims.PAPER_VALUES) are shown beside ours and never judged.

Conventions: a run's *final* value of a metric is the mean over its last `last_n` iterations, per seed; the tables
give mean +/- std over seeds (population std, ddof 0, as eval/passk.json), the std to 2 significant digits and the
mean and per-seed values to the same decimal place (`mean_std`); the figures draw the mean over seeds with a band
from the lowest to the highest seed, which, unlike mean +/- std, never leaves the range a quantity can take (KL >= 0).
"CORY" in a claim means each of LLM1 and LLM2, so both copies must show the effect.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from cory import plots
from cory.roles import TABLE3_QUERIES
from cory.claims import (
    COMBINED,
    ETA_SOURCE,
    HELD,
    INCONCLUSIVE,
    NOT_HELD,
    NOT_MEASURABLE,
    NOT_TESTED,
    Claim,
    EffectResult,
    PaperValue,
    build_claims,
    eta_text,
    final_value,
    partner_coef,
    smooth,
)
from cory.config import dotted_leaves
from cory.metrics import glossary_markdown
from cory.experiments import ExperimentConfig
from cory.results import SWEEP_TASKS, Inputs, Run, Sweep, load_inputs
from cory.settings import ReportConfig

"""The IMDB prompts of the paper's qualitative Table 3; samples.md shows them first where a run logged them."""


# --------------------------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------------------------

TASK_REWARD = {"imdb": "task reward (sentiment logit)", "math": "task reward (share correct)"}
KL_LABEL = r"KL$(\pi_\theta \,\|\, \pi_0)$, summed over the response"
COMBINED_LABEL = r"combined reward $r - \eta\,$KL"


class Drawn(NamedTuple):
    """A figure of the report, not yet written, and its caption in REPORT.md."""

    figure: Figure
    caption: str


def series(run: Run, key: str, label: str, smoothing: int = 1) -> plots.Series:
    """Mean over seeds with the lowest and highest seed at each iteration every seed reached (a crashed seed
    shortens the curve)."""
    frame = pd.DataFrame({s: pd.Series(smooth(y, smoothing)) for s, y in run.curves(key).items()}).dropna()
    return plots.Series(label, frame.index.to_numpy(), frame.mean(axis=1).to_numpy(), frame.min(axis=1).to_numpy(),
                        frame.max(axis=1).to_numpy(), n_seeds=frame.shape[1])


def _panels(curves: list[tuple[Run, str, str]], metrics: list[tuple[str, str, str]], smoothing: int):
    """One Panel per (metric, title, y label), each with a Series per (run, identity/role prefix, label)."""
    return [plots.Panel(title, ylabel, [series(run, f"{who}/{metric}", label, smoothing) for run, who, label in curves])
            for metric, title, ylabel in metrics]


def frontier(runs: dict[float, Run], who: str, last_n: int) -> list[plots.FrontierPoint]:
    """One point per eta of a sweep (any task): final task reward and KL, mean and range over seeds."""
    points = []
    for eta, run in runs.items():
        reward = list(run.per_seed(f"{who}/task_reward", lambda y: final_value(y, last_n)).values())
        kl = list(run.per_seed(f"{who}/kl", lambda y: final_value(y, last_n)).values())
        points.append(plots.FrontierPoint(eta, float(np.mean(reward)), (min(reward), max(reward)),
                                          float(np.mean(kl)), (min(kl), max(kl))))
    return points


def pareto_frontiers(sweep: Sweep, last_n: int) -> dict[str, list[plots.FrontierPoint]]:
    """The frontiers of Fig. 2(c) from a KL-coefficient sweep, whatever its task."""
    ppo, cory = sweep.runs["ppo"], sweep.runs["cory"]
    return {"PPO": frontier(ppo, "llm1", last_n), "CORY-LLM1": frontier(cory, "llm1", last_n),
            "CORY-LLM2": frontier(cory, "llm2", last_n)}


PROBE = "llm1/probe_task_reward"
PROBE_CAPTION = ("LLM1 alone on the same RL problems every train.probe_every iterations (llm1/probe_task_reward): "
                 "the training reward without the batches' draw of problems")


def probe_panel(curves: list[tuple[Run, str, str]], task: str) -> plots.Panel | None:
    """(d) LLM1's probe reward (TrainConfig.probe_every) of each LLM1 curve, if every seed of those runs logged it."""
    probed = [(run, label) for run, who, label in curves if who == "llm1"]
    if not probed or not all(PROBE in frame for run, _ in probed for frame in run.histories.values()):
        return None
    return plots.Panel("(d) task reward, fixed problems (probe)", TASK_REWARD[task],
                       [series(run, PROBE, label) for run, label in probed])


def _reward_kl(task: str) -> list[tuple[str, str, str]]:
    return [("task_reward", "(a) task reward", TASK_REWARD[task]), ("kl", "(b) KL divergence", KL_LABEL)]


def _with_combined(task: str, eta: str) -> list[tuple[str, str, str]]:
    """Task reward, KL and the combined reward, whose eta (`eta_text`) the panel title states."""
    return [*_reward_kl(task), ("combined_reward", f"(c) combined reward, {eta}", COMBINED_LABEL)]


def _over_seeds(n: int, mark: str = "band", unit: str = "seeds") -> str:
    """How a figure sums up its seeds, for its title: "mean of 3 seeds, band: lowest to highest seed"."""
    return f"mean of {n} {unit}, {mark}: {plots.BAND}" if n > 1 else f"1 {unit.removesuffix('s')}"


SWEEP_TITLES = {"imdb": "IMDB", "math": "math word problems (GSM8K in the paper)"}
"""Task -> how the title and caption of its Fig. 2(c) name it."""


def pareto_drawn(task: str, sweep: Sweep, last_n: int) -> Drawn:
    """Fig. 2(c) of one task's sweep: final task reward against -KL, one point per eta."""
    n = len(sweep.seeds)
    etas = ", ".join(f"{e:g}" for e in sorted(sweep.runs["ppo"]))
    return Drawn(plots.pareto_figure(
        pareto_frontiers(sweep, last_n),
        f"Fig. 2(c) (reproduced): PPO vs CORY over the KL coefficient η, {SWEEP_TITLES[task]}\n"
        f"final values ({_over_seeds(n, 'error bars')})", f"{TASK_REWARD[task]} after training, higher is better"),
        f"{SWEEP_TITLES[task][0].upper()}{SWEEP_TITLES[task][1:]}: final task reward against -KL, one point per fixed "
        f"KL coefficient η = ppo.init_kl_coef in {{{etas}}} (group `{sweep.group}`), labelled with its η. "
        + (f"Points: the mean of {n} seeds; error bars: {plots.BAND}." if n > 1 else "One seed: no error bars."))


def draw_figures(inputs: Inputs, cfg: ReportConfig) -> dict[str, Drawn]:
    """Every figure of the report (name -> figure and caption); `write_report` saves them as <name>.png."""
    imdb, maths, k = inputs.runs["imdb"], inputs.runs["math"], cfg.plot_smoothing
    n = len(imdb["ppo"].seeds)
    spread = _over_seeds(n)
    bands = f"Lines: the mean of {n} seeds; shaded bands: {plots.BAND}." if n > 1 else "One seed: no band."
    main_imdb = [(imdb["ppo"], "llm1", "PPO"), (imdb["ppo_2x"], "llm1", "PPO-2x"),
                 (imdb["cory"], "llm1", "CORY-LLM1"), (imdb["cory"], "llm2", "CORY-LLM2")]
    main_math = [(maths["ppo"], "llm1", "PPO"), (maths["cory"], "llm1", "CORY-LLM1"),
                 (maths["cory"], "llm2", "CORY-LLM2")]
    figures = {}
    for name, task, curves, figure, what in (
        ("fig3_imdb", "imdb", main_imdb, "Fig. 3", "IMDB, PPO vs PPO-2x vs CORY"),
        ("fig4_math", "math", main_math, "Fig. 4", "Math word problems, PPO vs CORY"),
    ):
        eta = eta_text({label: run for run, _, label in curves})
        panels, probe = _panels(curves, _with_combined(task, eta), k), probe_panel(curves, task)
        figures[name] = Drawn(
            plots.curves_figure(panels + ([probe] if probe else []), f"{figure} (reproduced): {what} ({spread})"),
            f"{what}: task reward, KL and {COMBINED} ({eta}; {ETA_SOURCE})"
            + (f", and (d) {PROBE_CAPTION}" if probe else "") + f". {bands}")
    ablations = [(imdb["cory"], "llm1", "CORY-LLM1"), (imdb["cory_no_kt"], "llm1", "CORY w/o KT (LLM1)"),
                 (imdb["cory_no_rex"], "pioneer", "CORY w/o REx, pioneer"),
                 (imdb["cory_no_rex"], "observer", "CORY w/o REx, observer"), (imdb["ppo"], "llm1", "PPO")]
    figures["fig6_ablations"] = Drawn(plots.curves_figure(
        _panels(ablations, _reward_kl("imdb"), k),
        f"Fig. 6 (reproduced): IMDB ablations of knowledge transfer (KT) and role exchange (REx) ({spread})"),
        f"IMDB ablations: task reward and KL. {bands}")
    coop, comp = imdb["cory"], imdb["cory_competitive"]
    figures["fig_coop_vs_comp"] = Drawn(plots.curves_figure(
        _panels([(coop, "llm1", f"LLM1, cooperative (c = {partner_coef(coop):g})"),
                 (comp, "llm1", f"LLM1, competitive (c = {partner_coef(comp):g})")], _reward_kl("imdb"), k),
        f"Cooperative vs competitive partner reward $r_{{self}} + c\\,r_{{partner}}$, IMDB ({spread})"),
        f"IMDB, LLM1 trained on r_self + c r_partner: task reward and KL. {bands}")
    # No response-length panel: the sampler draws the length (ppo.generation.response_length), alike for every method.
    figures["fig_diversity"] = Drawn(plots.curves_figure(
        _panels(main_imdb, [("distinct_1", "(a) distinct-1 of the responses", "distinct words / words"),
                            ("distinct_2", "(b) distinct-2 of the responses", "distinct bigrams / bigrams"),
                            ("entropy", "(c) policy entropy", "entropy per token (nats)")], k),
        f"Training stability and diversity, IMDB ({spread})"),
        f"IMDB: distinct-1 and distinct-2 of each batch's responses, and the policy's per-token entropy. {bands}")
    for task, sweep in inputs.sweeps.items():
        figures[f"fig2c_{SWEEP_TASKS[task]}"] = pareto_drawn(task, sweep, cfg.last_n)
    passk = []
    for model, label in (("base", "base"), ("ppo", "PPO"), ("cory_llm1", "CORY-LLM1"), ("cory_llm2", "CORY-LLM2")):
        ks = sorted(inputs.passk[model]["mean"], key=int)
        by_k = np.array([[run[x] for run in inputs.passk[model]["seeds"].values()] for x in ks])  # (k, seed)
        passk.append(plots.Series(label, np.array([int(x) for x in ks]), by_k.mean(1), by_k.min(1), by_k.max(1),
                                  n_seeds=by_k.shape[1]))
    trained = len(inputs.passk["ppo"]["seeds"])
    figures["fig5_passk"] = Drawn(plots.passk_figure(
        passk, "Fig. 5 (reproduced): pass@k on the held-out math problems\n"
        f"({_over_seeds(trained, unit='training seeds')})"),
        "pass@k (unbiased estimator) of the base model and of each trained model. "
        + (f"Lines: the mean of {trained} training seeds; bands: {plots.BAND}." if trained > 1
           else "One training seed: no band."))
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


def _place(x: float, significant: int) -> int:
    """Decimal place of x's `significant`-th significant digit (negative: left of the point; x != 0)."""
    return significant - 1 - math.floor(math.log10(abs(x)))


def decimals(mean: float, std: float) -> int:
    """Decimal places of a mean ± std: the std's 2nd significant digit, but no finer than the mean's 4th (a std of
    float noise, 1.8e-06 on 3.284, reads "3.284 ± 0.000"); none for equal whole numbers (an iteration, a count)."""
    if std == 0 and float(mean).is_integer():
        return 0
    places = ([_place(std, 2)] if std > 0 else []) + ([_place(mean, 4)] if mean != 0 else [])
    return min(places) if places else 0


def fixed(x: float, places: int) -> str:
    """x rounded to `places` decimals (to tens, hundreds... if negative); n/a for NaN; never "-0.00"."""
    if math.isnan(x):
        return "n/a"
    return f"{round(x, places) + 0.0:.{max(places, 0)}f}"


def mean_std(values: list[float]) -> tuple[str, int]:
    """("mean ± std (n seeds)", its decimal places) over the finite values: ("n/a", 0) without any; a single value
    to 4 significant digits."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "n/a", 0
    mean, std = float(np.mean(values)), float(np.std(values))
    places = decimals(mean, std)
    if len(values) == 1:
        return f"{fixed(mean, places)} (1 seed)", places
    return f"{fixed(mean, places)} ± {fixed(std, places)} ({len(values)} seeds)", places


def _table(header: list[str], rows: list[list]) -> list[str]:
    rows = [f"| {' | '.join(_cell(c) for c in row)} |" for row in rows]
    return [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}", *rows]


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
    return _table(["stage", "seconds", "minutes", "share", "peak host memory (GiB)",
                   "peak GPU memory of the stage's own process (GiB)"], rows)


def setup_markdown(inputs: Inputs) -> list[str]:
    """Models, reward model, hyperparameters (from the runs' config.json) and the time every stage took."""
    lines = ["## Setup", "", "### Base models (outputs/<profile>/metrics/base_models/)", ""]
    keys = ("params", "param_ratio", "val_perplexity", "train_tokens", "epochs", "train_seconds", "peak_gpu_gib")
    rows = [[name, *(_num(metrics.get(k)) for k in keys)] for name, metrics in inputs.base_models.items()]
    lines += _table(["model", *keys], rows)
    lines += ["", "### Reward model (metrics/reward_model.json)", ""]
    scalars = {k: v for k, v in inputs.reward_model.items() if isinstance(v, (int, float))}
    lines += _table(["metric", "value"], [[k, _num(v)] for k, v in scalars.items()])
    configs = {f"{g}/{name}": dotted_leaves(run.config) for g, runs in inputs.runs.items() for name, run in runs.items()}
    keys = [k for k in next(iter(configs.values())) if k != "seed"]
    shared = [k for k in keys if len({json.dumps(c.get(k)) for c in configs.values()}) == 1]
    varying = [k for k in keys if k not in shared]
    lines += ["", "### Hyperparameters (each run's config.json)", "", "Shared by every IMDB and math run:", ""]
    lines += _table(["setting", "value"], [[k, json.dumps(configs[next(iter(configs))][k])] for k in shared])
    lines += ["", "Different between runs:", ""]
    lines += _table(["setting", *configs], [[k, *(json.dumps(c.get(k)) for c in configs.values())] for k in varying])
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
    return lines + _table(header, rows) + [""]


PHASE_COLUMNS = {"iterations": ("iterations",), "samples and probes": ("samples", "probes"),
                 "checkpoints": ("checkpoints",)}
"""The report's split of a run's phase_seconds (cory.experiments.run_training); every other phase is "rest"."""


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
    return lines + _table(["setting", "why"], [[f"`{k}`", v] for k, v in cfg.deviations.items()]) + [""]


def verdict_rule(cfg: ReportConfig) -> str:
    """How REPORT.md's verdicts are read off the effects and their intervals."""
    return (
        "Each claim has one effect per sub-condition (for LLM1 and for LLM2, say): a number computed from the seed "
        "means of per-seed quantities (e.g. PPO's mean final KL over CORY-LLM1's), and the side of a threshold the "
        f"paper puts it on. Its {cfg.confidence:.0%} interval is a percentile bootstrap over seeds "
        f"({cfg.bootstrap_draws} draws, generator seed {cfg.bootstrap_seed}, so a report is reproducible): each "
        "run's seeds are drawn with replacement independently of every other run's (different runs share nothing "
        "that a seed number would pair), the quantities of one run seed by seed together; rates of seeds (the "
        "collapse claim) get exact intervals (Clopper-Pearson for a rate, an exact unconditional test inverted for "
        f"the difference of two). **{HELD}** = the whole interval lies on the claim's "
        f"side of its threshold; **{NOT_HELD}** = it lies wholly on the other side; **{INCONCLUSIVE}** = it contains "
        "the threshold, or there is none (a run with a single seed). A claim of several sub-conditions held if all "
        f"held, did not hold if any did not, and is {INCONCLUSIVE} otherwise; **{NOT_MEASURABLE}** = no numbers "
        "(e.g. no sweep of that task). With 3 seeds the 95% interval of one run's mean is the range of its seeds, so "
        "a held verdict then needs every seed on the claim's side. *Seeds needed* estimates, from the measured "
        "spread (the bootstrap standard error, shrinking as 1/sqrt(seeds)), how many seeds per run the interval "
        "needs to clear the threshold on the side of its estimate; on a held claim it can exceed the seeds used, "
        "since 3 seeds' interval cannot be wider than their range: that verdict then rests on too few seeds. Each "
        "claim's tables give its effects, the mean "
        "± std over seeds of every quantity (the std to 2 significant digits, the mean and per-seed values to the "
        "same decimal place), every seed's value (n/a: could not be computed) and, where the paper states or "
        "draws one, the paper's number (stated in its text or read off its figures), which no verdict reads."
    )


NOT_TESTED_LINE = ("**This profile tests no claim** (params `report.test_claims: false`): every verdict below reads "
                   f"\"{NOT_TESTED}\"; the numbers are shown, not judged.")


def _seed_list(seeds: list) -> str:
    return ", ".join(map(str, seeds))


def effect_number(x: float) -> str:
    """An effect's estimate or interval end: 4 significant digits, ∞ where infinite, n/a where NaN."""
    if math.isnan(x):
        return "n/a"
    return ("-∞" if x < 0 else "∞") if math.isinf(x) else f"{x:.4g}"


def interval_text(r: EffectResult) -> str:
    """"1.43 [0.21, 9.7]": the estimate at the seed means and its interval; "(no interval)" without one."""
    iv = r.interval
    if math.isnan(iv.low) or math.isnan(iv.high):
        return f"{effect_number(iv.estimate)} (no interval)"
    return f"{effect_number(iv.estimate)} [{effect_number(iv.low)}, {effect_number(iv.high)}]"


SIDE_WORDS = {">": ("above", "at or below"), ">=": ("at or above", "below"), "<": ("below", "at or above"),
              "<=": ("at or below", "above")}
"""op -> (where an interval lies for the claim to hold, where it lies when it did not)."""


def reason(r: EffectResult) -> str:
    """Why a sub-condition got its verdict, in words: where its interval lies against the threshold."""
    iv, t = r.interval, effect_number(r.threshold)
    span = f"[{effect_number(iv.low)}, {effect_number(iv.high)}]"
    if r.verdict == HELD:
        return f"{span} lies {SIDE_WORDS[r.op][0]} {t}"
    if r.verdict == NOT_HELD:
        return f"{span} lies {SIDE_WORDS[r.op][1]} {t}"
    if r.verdict == NOT_MEASURABLE:
        return "no value"
    if math.isnan(iv.low):
        return f"{effect_number(iv.estimate)}, no interval (a run with fewer than 2 seeds)"
    return f"{span} contains {t}"


def seeds_text(seeds: dict[str, int]) -> str:
    """"3 per run", or each run's count where they differ."""
    if not seeds:
        return "none"
    counts = set(seeds.values())
    if len(counts) == 1:
        n = counts.pop()
        return f"{n} per run" if len(seeds) > 1 else f"{n} ({next(iter(seeds))})"
    return ", ".join(f"{run} {n}" for run, n in seeds.items())


def needed_text(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    return "never (on the threshold)" if math.isinf(x) else f"{x:.0f}"


def paper_text(value: PaperValue | None) -> str:
    if value is None:
        return ""
    v = value.value
    return f"{v[0]:g} to {v[1]:g}" if isinstance(v, tuple) else f"{v:g}"


def verdict_line(claim: Claim) -> str:
    """The verdict with what it was read from: where each effect's interval lies against its threshold."""
    if not claim.tested:
        return (f"- **Verdict: {NOT_TESTED}**: this profile tests no claim (params report.test_claims: false); the "
                "numbers below are shown, not judged.")
    if not claim.results:
        return f"- **Verdict: {claim.verdict}** (no numbers)"
    conf = f"{claim.bootstrap.confidence:.0%}"
    parts = [f"{r.label}: {reason(r)}" for r in claim.results]
    return f"- **Verdict: {claim.verdict}** ({conf} intervals; {'; '.join(parts)})"


def figure_link(claim: Claim) -> str:
    """A markdown link to the claim's figure; "none" for a claim with nothing to draw (a sweep params lack)."""
    return f"[{claim.figure}]({claim.figure})" if claim.figure else "none"


def effects_table(claim: Claim) -> list[str]:
    """One row per sub-condition: our estimate and interval, the threshold, the verdict, seeds used and needed,
    and the paper's number where it states one for the same effect."""
    conf = f"{claim.bootstrap.confidence:.0%}"
    rows = [[r.label, interval_text(r), f"{r.op} {effect_number(r.threshold)}",
             r.verdict if claim.tested else NOT_TESTED, seeds_text(r.seeds), needed_text(r.seeds_needed),
             r.method,
             paper_text(claim.paper_values.get(r.label))] for r in claim.results]
    return _table(["effect", f"ours: at the seed means [{conf} interval]", "claim", "verdict", "seeds",
                   "seeds needed", "interval", "paper"], rows)


def claim_markdown(number: int, claim: Claim) -> list[str]:
    """The paper's statement, the rule, the verdict, the effects with their intervals, every quantity (mean +/- std
    over the seeds where it is finite, and per seed) and the paper's numbers beside ours."""
    lines = [f"### {number}. {claim.paper}", "", f"Figure: {figure_link(claim)}", "",
             f"- **Rule:** {claim.rule}", verdict_line(claim)]
    if claim.results:
        lines.append(f"- **Seeds:** {seeds_text(claim.seeds_used)}; seeds per run for a decided verdict at the "
                     f"measured spread: {needed_text(claim.seeds_needed)}")
    lines += [f"- {note}" for note in claim.notes] + [""]
    if claim.results:
        lines += effects_table(claim) + [""]
    rows = []
    for label, values in claim.quantities.items():
        # None: a model trained once (the base model), the same value for every seed
        seeds = [s for s in claim.seeds if s in values] or [s for s in (None,) if s in values]
        spread, places = mean_std([float(values[s]) for s in seeds])
        if spread == "n/a":  # no finite value: each value still shown, to its own 4 significant digits
            places = 4
        per_seed = ", ".join(f"{'-' if s is None else s}: {fixed(float(values[s]), places)}" for s in seeds)
        rows.append([label, spread, per_seed, paper_text(claim.paper_values.get(label))])
    if rows:
        lines += _table(["quantity", "mean ± std", "per seed", "paper"], rows) + [""]
    if claim.paper_values:
        lines += ["The paper's numbers (not this reproduction's; none is read by a verdict):", ""]
        lines += _table(["label", "paper", "source"],
                        [[label, paper_text(v), v.source] for label, v in claim.paper_values.items()]) + [""]
    return lines


def _json_number(x: float) -> float | str | None:
    """NaN is not JSON: None; an infinity as the string "inf" or "-inf" (float() reads both back)."""
    if x is None or math.isnan(x):
        return None
    return ("-inf" if x < 0 else "inf") if math.isinf(x) else float(x)


def claim_json(claim: Claim) -> dict:
    """claims.json's entry of a claim: its verdict and mean quantities (as before), and its effects with their
    intervals, thresholds, verdicts and seeds, the seeds it needs, the paper's numbers and the notes."""
    effects = [{"label": r.label, "estimate": _json_number(r.interval.estimate),
                "interval": [_json_number(r.interval.low), _json_number(r.interval.high)], "op": r.op,
                "threshold": r.threshold, "verdict": r.verdict if claim.tested else NOT_TESTED,
                "measured_verdict": r.verdict, "method": r.method, "seeds": r.seeds,
                "seeds_needed": _json_number(r.seeds_needed)} for r in claim.results]
    return {"verdict": claim.verdict, "means": {k: _json_number(v) for k, v in claim.means().items()},
            "effects": effects, "confidence": claim.bootstrap.confidence, "seeds": claim.seeds_used,
            "seeds_needed": _json_number(claim.seeds_needed) if claim.results else None,
            "paper_values": {label: {"value": list(v.value) if isinstance(v.value, tuple) else v.value,
                                     "source": v.source} for label, v in claim.paper_values.items()},
            "notes": claim.notes}


def summary_json(claims: list[Claim]) -> dict:
    return {c.key: claim_json(c) for c in claims}


def _effects_brief(entry: dict | None) -> str:
    """One claims.json entry's effects, "label: estimate [low, high]" each; "-" without any."""
    if not entry or not entry.get("effects"):
        return "-"

    def num(x) -> str:
        return "n/a" if x is None else effect_number(float(x))

    return "; ".join(f"{e['label']}: {num(e['estimate'])} [{num(e['interval'][0])}, {num(e['interval'][1])}]"
                     for e in entry["effects"])


def rerun_changes(ours: dict | None, theirs: dict | None) -> str:
    """Why two runs' verdicts of one claim differ, from their claims.json entries: the sub-conditions whose verdicts
    differ, with both intervals (an interval that contains the threshold in one run and not in the other is noise
    around the threshold, unless the runs' intervals are apart)."""
    if ours is None or theirs is None:
        return "only in this run" if theirs is None else "only in the rerun"
    if ours["verdict"] == theirs["verdict"]:
        return ""
    if not theirs.get("effects"):
        return "the rerun's claims.json has no effects (an older report, whose verdicts used another rule)"
    others = {e["label"]: e for e in theirs["effects"]}
    parts = []
    for e in ours.get("effects", []):
        o = others.get(e["label"])
        if o is None:
            parts.append(f"{e['label']}: not in the rerun")
        elif e.get("measured_verdict", e["verdict"]) != o.get("measured_verdict", o["verdict"]):
            parts.append(f"{e['label']}: {e.get('measured_verdict', e['verdict'])} here, "
                         f"{o.get('measured_verdict', o['verdict'])} there (threshold {e['op']} "
                         f"{effect_number(e['threshold'])})")
    return "; ".join(parts) or "the same sub-condition verdicts: the claim's rule or its sub-conditions changed"


def rerun_rows(ours: dict, theirs: dict) -> list[list[str]]:
    """One row per claim of either claims.json (this run's first): key, both verdicts, whether they agree, both
    runs' effects, and what changed (`rerun_changes`)."""
    keys = list(dict.fromkeys((*ours, *theirs)))
    return [[f"`{key}`", ours.get(key, {}).get("verdict", "-"), theirs.get(key, {}).get("verdict", "-"),
             "yes" if key in ours and key in theirs and ours[key]["verdict"] == theirs[key]["verdict"] else "**no**",
             _effects_brief(ours.get(key)), _effects_brief(theirs.get(key)), rerun_changes(ours.get(key),
                                                                                          theirs.get(key))]
            for key in keys]


def rerun_markdown(ours: dict, rerun: tuple[str, dict | None] | None) -> list[str]:
    """REPORT.md's comparison with another run of the same code (params report.rerun): `rerun` is (its path as
    shown, its claims.json or None where the file is missing); None: no comparison asked for."""
    if rerun is None:
        return []
    where, theirs = rerun
    lines = ["## Rerun of the same code (params `report.rerun`)", ""]
    if theirs is None:
        return lines + [f"No rerun to compare with: {where} does not exist.", ""]
    rows = rerun_rows(ours, theirs)
    agree = sum(row[3] == "yes" for row in rows)
    lines += [f"This run's verdicts against those of {where}: {agree} of {len(rows)} claims agree. Where a verdict "
              "changed, the last column names the sub-conditions whose verdicts moved; an interval that contains "
              "its threshold in one run only says that the seeds cannot tell the claim from its threshold.", ""]
    return lines + _table(["claim", "this run", "the rerun", "agree", "this run's effects [interval]",
                           "the rerun's effects [interval]", "what changed"], rows) + [""]


def notes_markdown(notes: str | None) -> list[str]:
    """The maintainers' notes on this run (profiles/notes/<profile>.md): which verdicts changed since the previous
    committed run, and why. The numbers and verdicts above and below are computed; these words are not."""
    if not notes or not notes.strip():
        return []
    return ["## Since the previous committed run (maintainers' notes, profiles/notes/)", "", notes.strip(), ""]


def report_markdown(
    inputs: Inputs, claims: list[Claim], cfg: ReportConfig, profile: str, captions: dict[str, str],
    notes: str | None = None, rerun: tuple[str, dict | None] | None = None,
) -> str:
    """REPORT.md: the verdicts, the comparison with a rerun (`rerun_markdown`), the maintainers' notes, the setup,
    every claim and the figures."""
    seeds = inputs.runs["imdb"]["ppo"].seeds
    iterations = {group: sorted({len(h) for run in runs.values() for h in run.histories.values()})
                  for group, runs in inputs.runs.items()}
    per_group = ", ".join(f"{group} {'-'.join(map(str, counts))}" for group, counts in iterations.items())
    lines = [
        f"# CORY reproduction report (profile `{profile}`)", "",
        f"Generated by `python -m pipeline.report` from outputs/{profile}/; every number and verdict below is computed "
        "from those files (rules: cory/claims.py). Do not edit by hand.", "",
        f"Seeds: {', '.join(map(str, seeds))}. Iterations per run: {per_group}. A run's *final* "
        f"value is the mean over its last {cfg.last_n} iterations; ± is the std over seeds (ddof 0). In the figures, "
        f"lines and points are means over seeds and bands and error bars span the {plots.BAND}, so a band never "
        "leaves the range a quantity can take (KL >= 0). "
        "Metric definitions: [METRICS.md](METRICS.md); generations before and after training: "
        "[samples.md](samples.md).",
        "", "## Verdicts", "", verdict_rule(cfg), "", *([NOT_TESTED_LINE, ""] if not cfg.test_claims else []),
        *_table(["#", "claim (paper)", "figure", "verdict", "seeds", "seeds needed"],
                [[i, c.paper, figure_link(c), f"**{c.verdict}**", seeds_text(c.seeds_used),
                  needed_text(c.seeds_needed) if c.results else "-"] for i, c in enumerate(claims, 1)]),
        "", *rerun_markdown(summary_json(claims), rerun), *notes_markdown(notes), *setup_markdown(inputs),
        *deviations_markdown(cfg), "## Claims", "",
    ]
    for i, claim in enumerate(claims, 1):
        lines += claim_markdown(i, claim)
    lines += ["## Figures", ""]
    for name in sorted(captions):  # paper order: 2c, 3, 4, 5, 6
        lines += [f"![{name}]({name}.png)", "", f"*{captions[name]}*", ""]
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


def read_rerun(cfg: ReportConfig, profile: str, root: Path) -> tuple[str, dict | None] | None:
    """(report.rerun as shown, its claims.json or None if missing); None where report.rerun is null."""
    if cfg.rerun is None:
        return None
    where = cfg.rerun.format(profile=profile)
    path = root / where
    return where, json.loads(path.read_text()) if path.is_file() else None


def write_report(
    outputs: Path, reports: Path, cfg: ReportConfig, experiments: dict[str, ExperimentConfig],
    seeds: list[int] | None, profile: str, notes: str | None = None, root: Path | None = None,
) -> list[Claim]:
    """Read outputs/<profile>/ (the groups and seeds that `experiments` and `seeds` of params name,
    cory.results.load_inputs, and the IMDB groups of report.imdb_groups) and write reports/<profile>/: the figures,
    REPORT.md, samples.md, METRICS.md and claims.json (each claim's verdict, mean quantities and effects, for `dvc
    metrics`/diffs and for comparing reruns). `root` is the project root report.rerun is relative to (default: the
    folder above reports/)."""
    inputs = load_inputs(outputs, experiments, seeds, cfg.imdb_groups)
    claims = build_claims(inputs, cfg)  # every quantity is computed (and every missing column found) before drawing
    reports.mkdir(parents=True, exist_ok=True)
    figures = draw_figures(inputs, cfg)
    for name, (figure, _) in figures.items():
        plots.save(figure, reports / f"{name}.png")
    captions = {name: caption for name, (_, caption) in figures.items()}
    rerun = read_rerun(cfg, profile, reports.parent.parent if root is None else root)
    (reports / "REPORT.md").write_text(report_markdown(inputs, claims, cfg, profile, captions, notes, rerun))
    (reports / "samples.md").write_text(samples_markdown(inputs, cfg))
    (reports / "METRICS.md").write_text(glossary_markdown())
    (reports / "claims.json").write_text(json.dumps(summary_json(claims), indent=2) + "\n")
    return claims
