"""REPORT.md and samples.md as markdown: the verdicts, the setup and time tables, each claim with its numbers, and
LLM1's generations before and after training (cory.report.report writes them beside the figures). Every number is
computed from the run files; every verdict comes from a written rule applied by `cory.report.claims.verdict`.

Conventions: a run's *final* value of a metric is the mean over its last `last_n` iterations, per seed; the tables
give mean +/- std over seeds (population std, ddof 0, as eval/passk.json), the std to 2 significant digits and the
mean and per-seed values to the same decimal place (`mean_std`); the figures draw the mean over seeds with a band
from the lowest to the highest seed, which, unlike mean +/- std, never leaves the range a quantity can take (KL >= 0).
"CORY" in a claim means each of LLM1 and LLM2, so both copies must show the effect.
"""

from __future__ import annotations

import json
import math

import numpy as np

from cory.report.claims import HELD, INCONCLUSIVE, NOT_HELD, NOT_MEASURABLE, NOT_TESTED, Claim, EffectResult, PaperValue
from cory.report import plots
from cory.report.config import ReportConfig
from cory.report.results import SWEEP_TASKS, Inputs, Run
from cory.rl.metrics import AGENT_METRICS, EVAL_METRICS, IDENTITIES, IDENTITY_ONLY_METRICS, ROLES, RUN_METRICS
from cory.schema import dotted_leaves
from cory.tasks.imdb import TABLE3_QUERIES


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


def table(header: list[str], rows: list[list]) -> list[str]:
    """The lines of a markdown table: the header, its rule, and each row's cells made safe (`_cell`). The one table
    builder of the report, METRICS.md and the MLflow parent run's description."""
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


NOT_TESTED_LINE = ("**This profile tests no claim of the paper** (params `report.test_claims: false`: too few seeds "
                   "and iterations to judge one): it checks that every stage runs. Every claim below shows its "
                   f"numbers, and its verdict reads \"{NOT_TESTED}\".")


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


def effectstable(claim: Claim) -> list[str]:
    """One row per sub-condition: our estimate and interval, the threshold, the verdict, seeds used and needed,
    and the paper's number where it states one for the same effect."""
    conf = f"{claim.bootstrap.confidence:.0%}"
    rows = [[r.label, interval_text(r), f"{r.op} {effect_number(r.threshold)}",
             r.verdict if claim.tested else NOT_TESTED, seeds_text(r.seeds), needed_text(r.seeds_needed),
             r.method,
             paper_text(claim.paper_values.get(r.label))] for r in claim.results]
    return table(["effect", f"ours: at the seed means [{conf} interval]", "claim", "verdict", "seeds",
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
        lines += effectstable(claim) + [""]
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
        lines += table(["quantity", "mean ± std", "per seed", "paper"], rows) + [""]
    if claim.paper_values:
        lines += ["The paper's numbers (not this reproduction's; none is read by a verdict):", ""]
        lines += table(["label", "paper", "source"],
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
    return lines + table(["claim", "this run", "the rerun", "agree", "this run's effects [interval]",
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
        f"# CORY reproduction report (profile `{profile}`)", "", *([NOT_TESTED_LINE, ""] if not cfg.test_claims else []),
        f"Generated by `python -m pipeline.report` from outputs/{profile}/; every number and verdict below is computed "
        "from those files (rules: cory/claims.py). Do not edit by hand.", "",
        f"Seeds: {', '.join(map(str, seeds))}. Iterations per run: {per_group}. A run's *final* "
        f"value is the mean over its last {cfg.last_n} iterations; ± is the std over seeds (ddof 0). In the figures, "
        f"lines and points are means over seeds and bands and error bars span the {plots.BAND}, so a band never "
        "leaves the range a quantity can take (KL >= 0). "
        "Metric definitions: [METRICS.md](METRICS.md); generations before and after training: "
        "[samples.md](samples.md).",
        # the rules of verdicts that no claim gets here would only mislead: none is judged
        "", "## Verdicts", "", *([verdict_rule(cfg), ""] if cfg.test_claims else []),
        *table(["#", "claim (paper)", "figure", "verdict", "seeds", "seeds needed"],
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
        lines += table(["prompt", "continuation"], rows) + [""]
    for group, name in (("imdb", "ppo"), ("imdb", "cory"), ("math", "ppo"), ("math", "cory")):
        run = inputs.runs[group][name]
        seed = run.seeds[0]
        iterations = sorted({r["iteration"] for r in run.samples})
        lines += [f"## {run.name} (seed {seed}), LLM1", ""]
        generations = []
        for it, when in ((iterations[0], "before"), (iterations[-1], "after")):
            for row in _pick([r for r in run.samples if r["iteration"] == it], cfg.samples):
                response, score, role = _llm1_generation(row)
                generations.append([f"{when} (iteration {it})", role, row["query"], response, _num(float(score))])
        lines += table(["when", "role", "query", "LLM1 response", "task reward"], generations) + [""]
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
