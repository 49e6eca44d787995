"""How a claim reads: each statement's verdict and the reason for it, the paper's value beside ours, the claim's
section of REPORT.md, its entry in claims.json, and the comparison of two runs' claims.json (a rerun)."""

from __future__ import annotations

import math

from cory.report.cells import fixed, mean_std, table
from cory.report.claims import HELD, NOT_HELD, NOT_MEASURABLE, NOT_TESTED, Claim, PaperValue, Test

NOT_TESTED_LINE = ("**This profile tests no claim of the paper** (params `report.test_claims: false`: too few seeds "
                   "and iterations to judge one): it checks that every stage runs. Every claim below shows its "
                   f"numbers, and its verdict reads \"{NOT_TESTED}\".")


def effect_number(x: float) -> str:
    """An effect's estimate or interval end: 4 significant digits, ∞ where infinite, n/a where NaN."""
    if math.isnan(x):
        return "n/a"
    return ("-∞" if x < 0 else "∞") if math.isinf(x) else f"{x:.4g}"


def interval_text(r: Test) -> str:
    """"1.43 [0.21, 9.7]": the estimate at the seed means and its interval; "(no interval)" without one."""
    iv = r.interval
    if math.isnan(iv.low) or math.isnan(iv.high):
        return f"{effect_number(iv.estimate)} (no interval)"
    return f"{effect_number(iv.estimate)} [{effect_number(iv.low)}, {effect_number(iv.high)}]"


SIDE_WORDS = {">": ("above", "at or below"), ">=": ("at or above", "below"), "<": ("below", "at or above"),
              "<=": ("at or below", "above")}
"""op -> (where an interval lies for the statement to hold, where it lies when it did not)."""


def p_text(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2g}"


def reason(r: Test, tail: float) -> str:
    """Why a statement got its verdict, in words: its test's p against the one-sided level (a direction), or where
    its interval lies against the threshold or margins."""
    iv, t = r.interval, effect_number(r.threshold)
    span = f"[{effect_number(iv.low)}, {effect_number(iv.high)}]"
    if r.verdict == NOT_MEASURABLE:
        return "no value"
    if r.kind == "direction":
        if r.verdict == HELD:
            return f"{r.method} p = {p_text(r.p)} <= {tail:g}"
        if r.verdict == NOT_HELD:
            return f"{r.method} p = {p_text(r.p_other)} <= {tail:g} the other way"
        cannot = f"; these seeds cannot reach {tail:g}" if r.smallest_p > tail else ""
        return f"{r.method} p = {p_text(r.p)} (smallest possible {p_text(r.smallest_p)}{cannot})"
    if math.isnan(iv.low):
        return f"{effect_number(iv.estimate)}, no interval (a run with fewer than 2 seeds)"
    if r.kind == "similar":
        words = {HELD: "lies within", NOT_HELD: "lies beyond"}.get(r.verdict, "reaches past")
        return f"{span} {words} ±{t}"
    if r.verdict == HELD:
        return f"{span} lies {SIDE_WORDS[r.op][0]} {t}"
    if r.verdict == NOT_HELD:
        return f"{span} lies {SIDE_WORDS[r.op][1]} {t}"
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


def statement_verdicts(claim: Claim) -> str:
    """"CORY's KL is lower than PPO's: held (...); more than 2x lower: did not hold (...)": each statement with its
    verdict and the reason."""
    tail = claim.settings.tail
    return "; ".join(f"{r.statement}: {r.verdict} ({reason(r, tail)})" for r in claim.results)


def verdict_line(claim: Claim) -> str:
    """The verdict with what it was read from: each statement's verdict and the reason."""
    if claim.absent:
        return f"- **Verdict: {NOT_TESTED}** in this profile: {claim.absent}."
    if not claim.tested:
        return (f"- **Verdict: {NOT_TESTED}**: this profile tests no claim (params report.test_claims: false); the "
                "numbers below are shown, not judged.")
    if not claim.results:
        return f"- **Verdict: {claim.verdict}** (no numbers)"
    return f"- **Verdict: {claim.verdict}** ({claim.settings.confidence:.0%} intervals; {statement_verdicts(claim)})"


def figure_link(claim: Claim) -> str:
    """A markdown link to the claim's figure; "none" for a claim with nothing to draw."""
    return f"[{claim.figure}]({claim.figure})" if claim.figure else "none"


def effects_table(claim: Claim) -> list[str]:
    """One row per statement: what it says, the number it reads with its interval, the test and its p (a direction),
    the verdict, seeds used and needed at 80% power, and the paper's number where it states one for the same effect."""
    conf = f"{claim.settings.confidence:.0%}"
    rows = [[r.statement, r.label, interval_text(r), r.method,
             f"{p_text(r.p)} ({p_text(r.smallest_p)})" if r.kind == "direction" else "-",
             r.verdict if claim.tested else NOT_TESTED, seeds_text(r.seeds), needed_text(r.seeds_needed),
             paper_text(claim.paper_values.get(r.label))] for r in claim.results]
    return table(["statement", "number", f"ours: at the seed means [{conf} interval]", "test",
                  "p (smallest possible)", "verdict", "seeds", "seeds needed (80% power)", "paper"], rows)


def claim_markdown(number: int, claim: Claim) -> list[str]:
    """The paper's statement, the rule, the verdict, the statements with their intervals, every quantity (mean +/-
    std over the seeds where it is finite, and per seed) and the paper's numbers beside ours."""
    lines = [f"### {number}. {claim.paper}", "", f"Figure: {figure_link(claim)}", "",
             f"- **Rule:** {claim.rule}", verdict_line(claim)]
    if claim.results:
        lines.append(f"- **Seeds:** {seeds_text(claim.seeds_used)}; seeds per run for a decided verdict with 80% "
                     f"power, were the effects as measured: {needed_text(claim.seeds_needed)}")
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
    """claims.json's entry of a claim: its verdict and mean quantities, and its statements ("effects") with their
    intervals, thresholds, tests, verdicts and seeds, the seeds it needs, the paper's numbers and the notes."""
    effects = [{"label": r.label, "statement": r.statement, "kind": r.kind,
                "estimate": _json_number(r.interval.estimate),
                "interval": [_json_number(r.interval.low), _json_number(r.interval.high)], "op": r.op,
                "threshold": _json_number(r.threshold), "verdict": r.verdict if claim.tested else NOT_TESTED,
                "measured_verdict": r.verdict, "method": r.method, "p": _json_number(r.p),
                "smallest_p": _json_number(r.smallest_p), "seeds": r.seeds,
                "seeds_needed": _json_number(r.seeds_needed)} for r in claim.results]
    return {"verdict": claim.verdict, "means": {k: _json_number(v) for k, v in claim.means().items()},
            "effects": effects, "confidence": claim.settings.confidence, "seeds": claim.seeds_used,
            "seeds_needed": _json_number(claim.seeds_needed) if claim.results else None,
            "paper_values": {label: {"value": list(v.value) if isinstance(v.value, tuple) else v.value,
                                     "source": v.source} for label, v in claim.paper_values.items()},
            "notes": claim.notes, **({"not_tested_because": claim.absent} if claim.absent else {})}


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
    """Why two runs' verdicts of one claim differ, from their claims.json entries: the statements whose verdicts
    differ, with both intervals (an interval that contains the threshold in one run and not in the other is noise
    around the threshold, unless the runs' intervals are apart)."""
    if ours is None or theirs is None:
        return "only in this run" if theirs is None else "only in the rerun"
    if ours["verdict"] == theirs["verdict"]:
        return ""
    if not theirs.get("effects"):
        return "the rerun's claims.json has no effects (an older report, whose verdicts used another rule)"
    def name(e: dict) -> str:  # a statement's words (an older claims.json has one effect per label)
        return e.get("statement", e["label"])

    others = {name(e): e for e in theirs["effects"]}
    parts = []
    for e in ours.get("effects", []):
        o = others.get(name(e))
        if o is None:
            parts.append(f"{name(e)}: not in the rerun")
        elif e.get("measured_verdict", e["verdict"]) != o.get("measured_verdict", o["verdict"]):
            parts.append(f"{name(e)}: {e.get('measured_verdict', e['verdict'])} here, "
                         f"{o.get('measured_verdict', o['verdict'])} there (threshold {e['op']} "
                         f"{effect_number(float(e['threshold'] if e['threshold'] is not None else 'nan'))})")
    return "; ".join(parts) or "the same statement verdicts: the claim's rule or its statements changed"


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
    """REPORT.md's comparison with another run of the profile (params report.rerun): `rerun` is (its path as shown,
    its claims.json or None where the file is missing); None: no comparison asked for."""
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
              f"agree{alone}. Where a verdict changed, the last column names the statements whose verdicts moved; "
              "an interval that contains its threshold in one run only says that the seeds cannot tell the claim from "
              "its threshold. Runs of the same seed numbers share their random streams (a seed fixes the response "
              "lengths and the sampling): agreement with such a run shows that the pipeline repeats, not that a "
              "verdict replicates on new seeds.", ""]
    return lines + table(["claim", "this run", "the other run", "agree", "this run's effects [interval]",
                           "the other run's effects [interval]", "what changed"], rows) + [""]
