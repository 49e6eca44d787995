"""The report's figures: the paper's Figs. 2(c), 3, 4, 5 and 6 and this reproduction's own, each with its caption,
drawn from the runs (cory.report.results) by cory.report.plots. A figure is the mean over seeds with a band from the
lowest to the highest seed."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from cory.report.claims import COMBINED, ETA_SOURCE, eta_text, final_value, partner_coef, smooth
from cory.report.mechanism import eta as eta_of, path, reward_at_kl
from cory.report import plots
from cory.report.config import ReportConfig
from cory.report.results import SWEEP_TASKS, Inputs, Run, Sweep


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


def ablation_rows(imdb: dict[str, Run], smoothing: int) -> list[list[plots.Panel]]:
    """Fig. 6, a row per ablation the group ran (without knowledge transfer; without role exchange, pioneer and
    observer), each against CORY-LLM1 and PPO (a reference line): five curves and their bands in one panel could not
    be read."""
    rows = []
    ablations = []
    if "cory_no_kt" in imdb:
        ablations.append(("ab", "w/o KT", [(imdb["cory_no_kt"], "llm1", "CORY w/o KT (LLM1)")]))
    if "cory_no_rex" in imdb:
        ablations.append(("cd" if ablations else "ab", "w/o REx",
                          [(imdb["cory_no_rex"], "pioneer", "CORY w/o REx, pioneer"),
                           (imdb["cory_no_rex"], "observer", "CORY w/o REx, observer")]))
    for letters, short, ablated in ablations:
        curves = [(imdb["cory"], "llm1", "CORY-LLM1"), *ablated]
        row = []
        for letter, (metric, title, ylabel) in zip(letters, _reward_kl("imdb")):
            panel_title = f"({letter}) {title.split(') ', 1)[1]}, {short}"
            reference = series(imdb["ppo"], f"llm1/{metric}", "PPO", smoothing)
            reference.reference = True
            row.append(plots.Panel(panel_title, ylabel, [series(run, f"{who}/{metric}", label, smoothing)
                                                         for run, who, label in curves] + [reference]))
        rows.append(row)
    return rows


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


FRONTIER_POINTS = 12
"""KL levels at which the matched-KL figure draws each run."""


def frontier_drawn(group: str, model: str, runs: dict[str, Run], cfg: ReportConfig) -> Drawn:
    """The decision rule's picture (report.mechanism): each run's task reward where its smoothed KL first reaches
    each level, mean over seeds with the band from the lowest to the highest seed, at levels every seed crosses."""
    w = cfg.stability_window
    kls = [smooth(kl, w) for run in runs.values() for _, kl in path(run).values()]
    low, high = max(float(k[0]) for k in kls), min(float(np.max(k)) for k in kls)
    levels = np.linspace(low, high, FRONTIER_POINTS + 1)[1:] if high > low else np.array([])
    series = []
    for name, run in runs.items():
        by_seed = np.array([[reward_at_kl(r, k, x, w) for x in levels] for r, k in path(run).values()])
        if by_seed.size:
            series.append(plots.Series(f"{name} (η {eta_of(run):g})", levels, by_seed.mean(0), by_seed.min(0),
                                       by_seed.max(0), n_seeds=len(by_seed)))
    panel = plots.Panel("task reward at matched KL", "task reward (sentiment logit), smoothed", series,
                        xlabel="KL (smoothed), where each seed first reaches it")
    n = len(next(iter(runs.values())).seeds)
    drawn = (f"at {len(levels)} levels every seed crosses. Lines: the mean of {n} seeds; bands: {plots.BAND}."
             if len(levels) else "but no KL level lies inside every seed's smoothed range, so nothing is drawn.")
    return Drawn(plots.curves_figure([panel], f"Task reward at matched KL on {model} ({_over_seeds(n)})"),
                 f"The decision rule's reading (report.mechanism, group `{group}`): each run's task reward (CORY's "
                 f"pioneer role) where its KL, both smoothed over {w} iterations, first reaches each level, {drawn}")


def draw_figures(inputs: Inputs, cfg: ReportConfig) -> dict[str, Drawn]:
    """Every figure of the report (name -> figure and caption); `write_report` saves them as <name>.png."""
    imdb, maths, k = inputs.runs["imdb"], inputs.runs["math"], cfg.plot_smoothing
    n = len(imdb["ppo"].seeds)
    spread = _over_seeds(n)
    bands = f"Lines: the mean of {n} seeds; shaded bands: {plots.BAND}." if n > 1 else "One seed: no band."
    main_imdb = [(imdb["ppo"], "llm1", "PPO"), *([(imdb["ppo_2x"], "llm1", "PPO-2x")] if "ppo_2x" in imdb else []),
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
    for group in cfg.imdb_groups:  # Fig. 3 of every other IMDB group (another base model): its PPO and CORY runs
        if group == "imdb":
            continue
        runs, model = inputs.runs[group], inputs.model_of(group)
        curves = [(runs[name], agent, label) for name, agent, label in (
            ("ppo", "llm1", "PPO"), ("ppo_2x", "llm1", "PPO-2x"), ("cory", "llm1", "CORY-LLM1"),
            ("cory", "llm2", "CORY-LLM2")) if name in runs]
        m = len(runs["ppo"].seeds)
        eta = eta_text({label: run for run, _, label in curves})
        figures[f"fig3_{group}"] = Drawn(
            plots.curves_figure(_panels(curves, _with_combined("imdb", eta), k),
                                f"Fig. 3 (reproduced) on {model}: IMDB, PPO vs CORY ({_over_seeds(m)})"),
            f"IMDB on {model} (group `{group}`): task reward, KL and {COMBINED} ({eta}; {ETA_SOURCE}). "
            + (f"Lines: the mean of {m} seeds; shaded bands: {plots.BAND}." if m > 1 else "One seed: no band."))
    for group in dict.fromkeys(("imdb", *cfg.imdb_groups)):  # Fig. 6 and the partner reward, where a group ran them
        runs = inputs.runs[group]
        m = len(runs["ppo"].seeds)
        on = "IMDB" if group == "imdb" else f"IMDB on {inputs.model_of(group)}"
        fig6 = "Fig. 6 (reproduced)" + ("" if group == "imdb" else f" on {inputs.model_of(group)}")
        suffix = "" if group == "imdb" else f"_{group}"
        lines = f"Lines: the mean of {m} seeds; shaded bands: {plots.BAND}." if m > 1 else "One seed: no band."
        if "cory_no_kt" in runs or "cory_no_rex" in runs:
            figures[f"fig6_ablations{suffix}"] = Drawn(plots.curves_figure(
                ablation_rows(runs, k), f"{fig6}: IMDB ablations of knowledge transfer (KT) and role exchange (REx) "
                f"({_over_seeds(m)})"),
                f"{on} ablations: task reward and KL, one row per ablation against CORY-LLM1, with PPO as a thin line "
                f"(no band) to read both against. {lines}")
        if "cory_competitive" in runs:
            coop, comp = runs["cory"], runs["cory_competitive"]
            figures[f"fig_coop_vs_comp{suffix}"] = Drawn(plots.curves_figure(
                _panels([(coop, "llm1", f"LLM1, cooperative (c = {partner_coef(coop):g})"),
                         (comp, "llm1", f"LLM1, competitive (c = {partner_coef(comp):g})")], _reward_kl("imdb"), k),
                f"Cooperative vs competitive partner reward $r_{{self}} + c\\,r_{{partner}}$, {on} ({_over_seeds(m)})"),
                f"{on}, LLM1 trained on r_self + c r_partner: task reward and KL. {lines}")
    rule = cfg.mechanism
    if rule is not None and rule.group in inputs.runs:
        names = [*rule.frontier, *rule.cory, *([rule.control] if rule.control else [])]
        figures[f"fig_frontier_{rule.group}"] = frontier_drawn(rule.group, inputs.model_of(rule.group), {n: inputs.runs[rule.group][n]
                                                                            for n in names}, cfg)
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
