"""How a claim reads: its verdict rule, each effect's interval and reason, the paper's value beside ours, the claim's
section of REPORT.md, its entry in claims.json, and the comparison of two runs' claims.json (a rerun)."""

from __future__ import annotations

import math

from cory.report.claims import HELD, INCONCLUSIVE, NOT_HELD, NOT_MEASURABLE, NOT_TESTED, Claim, EffectResult, PaperValue
from cory.report.config import ReportConfig
from cory.report.cells import fixed, mean_std, table


def verdict_rule(cfg: ReportConfig) -> str:
    """How REPORT.md's verdicts are read off the effects and their intervals."""
    return (
        "Each claim has one effect per sub-condition (for LLM1 and for LLM2, say): a number computed from the seed "
        "means of per-seed quantities (e.g. PPO's mean final KL over CORY-LLM1's), and the side of a threshold the "
        f"paper puts it on. Its {cfg.confidence:.0%} interval is a percentile bootstrap over seeds "
        f"({cfg.bootstrap_draws} draws, generator seed {cfg.bootstrap_seed}, so a report is reproducible): each "
        "run's seeds are drawn with replacement independently of every other run's (different runs share nothing "
        "that a seed number would pair), the quantities of one run seed by seed together, and the percentiles are "
        "those of Hesterberg's expanded interval at the fewest seeds of the effect's runs, widened where needed to "
        "Student's t interval on the bootstrap's standard error (the plain percentile interval of a few seeds is too "
        "narrow, and at 3 seeds the draws end at the seeds' extremes, whose range holds the median only 75% of the "
        "time), but never beyond the values the effect can take (a share: 0 to 1); "
        "rates of seeds (the collapse claim) get exact intervals (Clopper-Pearson for a rate, an exact unconditional test inverted for "
        f"the difference of two). **{HELD}** = the whole interval lies on the claim's "
        f"side of its threshold; **{NOT_HELD}** = it lies wholly on the other side; **{INCONCLUSIVE}** = it contains "
        "the threshold, or there is none (a run with a single seed). A claim of several sub-conditions held if all "
        f"held, did not hold if any did not, and is {INCONCLUSIVE} otherwise; **{NOT_MEASURABLE}** = no numbers "
        "(e.g. no sweep of that task). *Seeds needed* estimates, from the measured spread (the bootstrap standard "
        "error, shrinking as 1/sqrt(seeds), at Student's t quantile), how many seeds per run the interval needs to "
        "clear the threshold on the side of its estimate; a decided verdict never needs more than it used, except "
        "where an infinite draw (a ratio to a mean of 0) leaves no standard error and the percentile interval alone "
        "decides. "
        "Each claim's tables give its effects, the mean "
        "± std over seeds of every quantity (the std to 2 significant digits, the mean and per-seed values to the "
        "same decimal place), every seed's value (n/a: could not be computed) and, where the paper states or "
        "draws one, the paper's number (stated in its text or read off its figures), which no verdict reads."
    )


NOT_TESTED_LINE = ("**This profile tests no claim of the paper** (params `report.test_claims: false`: too few seeds "
                   "and iterations to judge one): it checks that every stage runs. Every claim below shows its "
                   f"numbers, and its verdict reads \"{NOT_TESTED}\".")


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
    """One row per claim of either claims.json (this run's first): key, both verdicts, whether they agree ("-" for a
    claim that one of them lacks: a rerun that ended early, or a claim one report did not have), both runs' effects,
    and what changed (`rerun_changes`)."""
    keys = list(dict.fromkeys((*ours, *theirs)))

    def agree(key: str) -> str:
        if key not in ours or key not in theirs:
            return "-"
        return "yes" if ours[key]["verdict"] == theirs[key]["verdict"] else "**no**"

    return [[f"`{key}`", ours.get(key, {}).get("verdict", "-"), theirs.get(key, {}).get("verdict", "-"), agree(key),
             _effects_brief(ours.get(key)), _effects_brief(theirs.get(key)), rerun_changes(ours.get(key),
                                                                                          theirs.get(key))]
            for key in keys]


def rerun_markdown(ours: dict, rerun: tuple[str, dict | None] | None) -> list[str]:
    """REPORT.md's comparison with another run of the profile (params report.rerun: a rerun of the same code, or a
    run of other code or on another GPU, which the maintainers' notes name): `rerun` is (its path as shown, its
    claims.json or None where the file is missing); None: no comparison asked for."""
    if rerun is None:
        return []
    where, theirs = rerun
    lines = ["## Another run (params `report.rerun`)", ""]
    if theirs is None:
        return lines + [f"No other run to compare with: {where} does not exist.", ""]
    rows = rerun_rows(ours, theirs)
    agree = sum(row[3] == "yes" for row in rows)
    both = sum(row[3] != "-" for row in rows)
    alone = f" ({len(rows) - both} in one of them only)" if both < len(rows) else ""
    lines += [f"This run's verdicts against those of {where}: {agree} of the {both} claims both runs scored "
              f"agree{alone}. Where a verdict changed, the last column names the sub-conditions whose verdicts moved; "
              "an interval that contains its threshold in one run only says that the seeds cannot tell the claim from "
              "its threshold.", ""]
    return lines + table(["claim", "this run", "the other run", "agree", "this run's effects [interval]",
                           "the other run's effects [interval]", "what changed"], rows) + [""]
