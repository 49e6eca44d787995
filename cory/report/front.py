"""The first screen of REPORT.md: the answer in a few generated lines (does CORY beat PPO on the pretrained LM, and the
numbers around it), the claims table, how the claims are judged, what this run was, and what each experiment group
can and cannot test. Every sentence is generated from the claims and the run files."""

from __future__ import annotations

import math

import numpy as np

from cory.report.cells import table
from cory.report.claims import (HELD, INCONCLUSIVE, NOT_HELD, NOT_MEASURABLE, NOT_TESTED, Claim,
                                final_as_pioneer)
from cory.report.claims_text import interval_text, needed_text, reason, seeds_text
from cory.report.collapse import rate_text
from cory.report.config import ReportConfig
from cory.report.results import Inputs

TALLY = (HELD, NOT_HELD, INCONCLUSIVE, NOT_MEASURABLE, NOT_TESTED)


def group_key(group: str | None, key: str) -> str:
    """A claim's key in group `group` (the `imdb` group's keys have no prefix)."""
    return key if group in (None, "imdb") else f"{group}/{key}"


def _tests(claim: Claim | None, kind: str) -> list:
    return [t for t in (claim.results if claim is not None and not claim.absent else []) if t.kind == kind]


def headline(mech: Claim | None, cfg: ReportConfig, model: str) -> str:
    """The answer's first line: does CORY beat PPO on the pretrained LM, and why the rule says so."""
    group = cfg.mechanism.group if cfg.mechanism else None
    ask = (f"**Does CORY beat PPO on the pretrained LM, {model} in group `{group}`?**" if group
           else "**Does CORY beat PPO on a pretrained LM?**")
    if mech is None or mech.absent:
        return f"{ask} Not tested in this profile: {mech.absent if mech else 'no rule'}."
    if not cfg.test_claims:
        return f"{ask} Not judged: this profile tests no claim (report.test_claims: false)."
    verdict = mech.verdict
    if verdict == HELD:
        return (f"{ask} Yes ({HELD}): each CORY run reaches more task reward at matched KL than every PPO run of the "
                "frontier" + (" and than CORY without knowledge transfer." if cfg.mechanism.control else "."))
    if verdict == NOT_HELD:
        below = next(t for t in _tests(mech, "magnitude") if t.verdict == NOT_HELD)
        return (f"{ask} No ({NOT_HELD}): {below.label} is {interval_text(below)}, below the smallest effect of "
                f"interest, {below.threshold:.3g} (report.mechanism.margin x PPO's task-reward gain).")
    return f"{ask} Undecided ({verdict}): these seeds show neither a gain at matched KL nor its absence."


def answer_lines(claims: list[Claim], inputs: Inputs, cfg: ReportConfig) -> list[str]:
    """5-8 bullet lines: the headline, the reward at matched KL, the KL's direction and size, the collapse rates, the
    no-knowledge-transfer control, math pass@1, and the verdict tally."""
    by_key = {c.key: c for c in claims}
    mech = by_key.get("mechanism")
    group = cfg.mechanism.group if cfg.mechanism else next((g for g in cfg.imdb_groups if g != "imdb"), "imdb")
    judged = cfg.test_claims
    lines = [headline(mech, cfg, inputs.model_of(cfg.mechanism.group) if cfg.mechanism else "")]
    control = cfg.mechanism.control if cfg.mechanism else None
    gains = [t for t in _tests(mech, "magnitude") if not (control and t.label.endswith(f"- {control} reward at "
                                                                                       "matched KL"))]
    if gains:
        lines.append(f"Task reward at matched KL, CORY's pioneer - other (mean over KL levels, paired by seed, "
                     f"{cfg.confidence:.0%} interval): " + "; ".join(
                         f"{t.label.removesuffix(' reward at matched KL')} {interval_text(t)}" for t in gains) + ".")
    kl = by_key.get(group_key(group, "imdb_kl_ratio"))
    if kl is not None and kl.results:
        parts = []
        for x in ("LLM1", "LLM2"):
            tests = [t for t in kl.results if t.label.endswith(f"CORY-{x} final KL")]
            if tests:
                said = "; ".join(f"{t.statement}: {t.verdict}" for t in tests) if judged else ""
                parts.append(f"PPO / CORY-{x} (as pioneer) {interval_text(tests[0])}" + (f" ({said})" if said else ""))
        lines.append(f"KL on {inputs.model_of(group)}, final: " + "; ".join(parts) + ".")
    collapse = by_key.get(group_key(group, "imdb_collapse"))
    if collapse is not None and collapse.quantities:
        rates = [f"{label.split(' degenerate')[0]} {rate_text(values, cfg.confidence)}"
                 for label, values in collapse.quantities.items() if "degenerate" in label]
        lines.append(f"Degenerate seeds (collapse by behaviour, report.collapse; {cfg.confidence:.0%} "
                     "Clopper-Pearson): " + "; ".join(rates) + ".")
    if control:
        tests = [t for t in (mech.results if mech is not None and not mech.absent else [])
                 if t.label.endswith(f"- {control} reward at matched KL")]
        if tests:
            verdicts = ", ".join(f"{'above' if t.kind == 'direction' else 'by at least the margin'}: {t.verdict}"
                                 for t in tests)
            text = f"{tests[0].label.removesuffix(' reward at matched KL')} {interval_text(tests[0])}" + (
                f" ({verdicts})" if judged else "")
            meaning = ""
            if judged:
                directions = [t.verdict for t in tests if t.kind == "direction"]
                meaning = (" CORY reaches more reward at matched KL than without knowledge transfer: cooperation, "
                           "not dilution alone." if directions and all(v == HELD for v in directions) else
                           " Without knowledge transfer CORY reaches as much: what it shows at matched KL, dilution "
                           "alone gives." if any(t.kind == "magnitude" and t.verdict == NOT_HELD for t in tests) else
                           " The seeds cannot tell cooperation from dilution.")
            lines.append(f"Without knowledge transfer ({control}), task reward at matched KL: {text}.{meaning}")
    passk = by_key.get("passk")
    if passk is not None and passk.quantities:
        means = passk.means()
        first = min((label for label in means if label.startswith("pass@")), key=lambda s: int(s[5:].split()[0]))
        k = first.split()[0]
        shown = ", ".join(f"{who} {means[f'{k} {who}']:.3g}" for who in ("base", "PPO", "CORY-LLM1", "CORY-LLM2")
                          if f"{k} {who}" in means)
        diff = next((t for t in passk.results if t.label == f"CORY-LLM1 - PPO {k}"), None)
        lines.append(f"Math {k} (a sanity check): {shown} (means over training seeds)"
                     + (f"; CORY-LLM1 - PPO {interval_text(diff)}" if diff else "") + ".")
    counts = {v: sum(c.verdict == v for c in claims) for v in TALLY}
    if judged:
        absent = sum(bool(c.absent) for c in claims)
        lines.append(f"Verdicts of the {len(claims)} claims: " + ", ".join(
            f"{n} {v}" + (" (in this profile)" if v == NOT_TESTED and absent else "") for v, n in counts.items()
            if n) + ".")
    else:
        lines.append(f"{len(claims)} claims, none judged in this profile.")
    return [f"- {line}" for line in lines]


def claims_table(claims: list[Claim], cfg: ReportConfig) -> list[str]:
    """One row per claim: its verdict and, in words, each statement's verdict and why."""
    rows = []
    for i, c in enumerate(claims, 1):
        if c.absent:
            said = f"not tested in this profile: {c.absent}"
        elif not c.tested:
            said = "; ".join(f"{r.statement}: {interval_text(r)}" for r in c.results)
        else:
            said = "; ".join(f"{r.statement}: {r.verdict} ({reason(r, c.settings.tail)})" for r in c.results)
        rows.append([i, c.paper, f"**{c.verdict}**", said or "-", seeds_text(c.seeds_used),
                     needed_text(c.seeds_needed) if c.results and c.tested else "-"])
    return table(["#", "claim (paper)", "verdict", "statements", "seeds", "seeds needed (80% power)"], rows)


def methods_markdown(cfg: ReportConfig) -> list[str]:
    """How the claims are judged, in short paragraphs (docs/claims.md has the whole of it)."""
    tail = (1 - cfg.confidence) / 2
    final = (f"**Final values.** A run's *final* value of a metric is the mean over its last {cfg.last_n} iterations; "
             "CORY's KL and task reward beside PPO's are its pioneer's (each LLM's last iterations as pioneer: an "
             "observer's KL is taken on another prompt, the pioneer's answer in context). Tables give mean ± std over "
             "seeds (ddof 0); figures draw the mean with a band from the lowest to the highest seed.")
    if not cfg.test_claims:
        return [final, "", "The rules that judge the claims in a profile that tests them: docs/claims.md.", ""]
    rule = cfg.mechanism
    decision = ("**The decision rule** (report.mechanism; docs/claims.md). One KL coefficient cannot tell a better "
                "trade-off from slower learning: a CORY agent trains on its reward plus its partner's, which dilutes "
                "its own much as a larger KL coefficient would. So each run is read along its path: each seed's task "
                f"reward and KL smoothed over {cfg.stability_window} iterations, the reward where the KL first reaches "
                "each level of a grid both compared runs cross, averaged over the levels. CORY beats PPO where each "
                "CORY run lies above every PPO run of the frontier (PPO at several KL coefficients) and above CORY "
                "without knowledge transfer (else the gain is dilution), each by an exact signed-rank test of the "
                "per-seed differences; it does not where some difference's interval lies below the smallest effect "
                + (f"of interest, {rule.margin:g} x PPO's task-reward gain." if rule else "of interest."))
    return [
        "## How the claims are judged", "", decision, "",
        "**Direction and magnitude, apart.** A comparison of two arms states its direction (\"CORY's KL is lower "
        "than PPO's\") apart from its size (\"more than 2x lower\"). The direction is an exact rank test: signed-rank "
        "on the per-seed differences where the arms share seeds, rank-sum otherwise, each an exact permutation test "
        f"(scipy.stats.permutation_test), one-sided at {tail:g}. Its p cannot fall below 1/2^n for n pairs or "
        "1/C(n_a + n_b, n_a) for two arms, which the tables give beside it: 3 pairs cannot reach "
        f"{tail:g}, 6 can. The size is read off the interval against the paper's threshold: whole interval on the "
        "claim's side, or wholly on the other.", "",
        "**Intervals.** Runs of one group with the same seed share the seed's random streams (the response lengths, "
        "the sampling), so their final values correlate seed by seed: where the arms share seeds, an effect is "
        "computed seed by seed and its interval is Student's t on the per-seed values (n - 1 degrees of freedom); "
        "otherwise Welch's, with Satterthwaite's degrees of freedom. A ratio of two positive means is analysed on "
        "the log scale (the delta method), so it never reaches below 0; a quantity's interval stops at the values "
        "it can take. One run's mean against a set value (a slope above 0) is read off its t interval. \"Similar\" "
        f"is two one-sided tests of the signed difference: its {cfg.confidence:.0%} interval inside ±{cfg.tolerance:g} "
        "x PPO's task-reward gain.", "",
        "**Rates and collapse.** A seed is degenerate when its end behaviour shows it (report.collapse): distinct-2 "
        "or entropy fell far below its start, the task reward fell from its peak by more than a share of what it "
        "gained, or its answers leak chat-template tokens. Each method's own rate gets a Clopper-Pearson interval, "
        "a difference of two rates the interval of an exact unconditional test. The final KL above "
        f"report.collapse_kl ({cfg.collapse_kl:g}) is shown beside them, not counted: it is another model's scale.", "",
        "**Seeds needed** is the seed count per arm at which a verdict would be decided with 80% power, were the "
        "effect and spreads as measured (noncentral t; exact binomial sums for rates). A spread from 3-4 seeds is "
        "itself uncertain, so it is an estimate; \"never\" means the estimate sits on the threshold.", "",
        final, "",
    ]


def run_markdown(inputs: Inputs, cfg: ReportConfig) -> list[str]:
    """What this run was, from its files: the device, the base models' sizes, each group's runs, seeds and
    iterations, and the stages' durations."""
    devices = sorted({run.device for runs in inputs.runs.values() for run in runs.values() if run.device})
    lines = ["## This run", "", f"Device: {', '.join(devices) or 'not recorded'} (the runs' provenance.json)."]
    models = []
    for name, m in inputs.base_models.items():
        size = f"{m['params'] / 1e6:.1f}M parameters" if isinstance(m.get("params"), (int, float)) else "size n/a"
        how = f"trained here from scratch ({m['epochs']:.3g} epochs)" if "epochs" in m else "pretrained"
        models.append(f"{name} {size}, {how}")
    if models:
        lines.append("Base models: " + "; ".join(models) + ".")
    rows = []
    for group, runs in inputs.runs.items():
        seeds = sorted({s for run in runs.values() for s in run.seeds})
        lengths = sorted({len(h) for run in runs.values() for h in run.histories.values()})
        wall = [w for run in runs.values() for w in run.wall_time_s.values() if math.isfinite(w)]
        rows.append([f"`{group}`", inputs.model_of(group), ", ".join(runs), f"{len(seeds)} ({seeds})",
                     "-".join(map(str, lengths)), f"{np.mean(wall):.0f}" if wall else "-"])
    lines += ["", *table(["group", "model", "runs", "seeds", "iterations", "mean run wall time (s)"], rows)]
    stages = [t for t in inputs.timings if t.get("stage") != "report"]
    if stages:
        total = sum(float(t["seconds"]) for t in stages)
        lines += ["", "Stages: " + ", ".join(f"{t['stage']} {float(t['seconds']):.0f} s" for t in stages)
                  + f"; {total / 60:.1f} minutes in all, the report stage aside (the time table below)."]
    return lines + [""]


ROLES = {
    "imdb": ("a sanity check of the pipeline. A model trained here from scratch on movie reviews alone has never "
             "read an instruction, so it cannot read the observer's prompt (\"I can make this sentence ... more "
             "positive\"): knowledge transfer, the mechanism the paper credits, has nothing to act through. It tests "
             "the 2x-parameter claim (with ppo_2x) and whether the pipeline reproduces PPO's collapse, not whether "
             "CORY beats PPO."),
    "math": ("a sanity check of the verifiable reward, pass@k and CORY's plumbing. Its PPO ends at a final KL of "
             "{kl} (mean over seeds){regime} pass@k is judged for k <= {k}, the paper's range."),
}
LOW_KL = (", below report.calibration_kl ({target:g}), where PPO does not collapse, while the paper's GSM8K claims (a "
          "peak then a decline, collapse) live where it does: those claims cannot show here what the paper says.")


def groups_markdown(inputs: Inputs, claims: list[Claim], cfg: ReportConfig) -> list[str]:
    """What each experiment group can and cannot test, and why, with how many of its claims this profile tests."""
    lines = ["## What each experiment group can test", ""]
    for group, runs in inputs.runs.items():
        if cfg.mechanism and group == cfg.mechanism.group:
            role = ("the experiment that answers the question: a pretrained LM that can read the observer's prompt, "
                    "with the runs the decision rule compares (" + ", ".join(runs) + ").")
        elif group == "math":
            ppo = runs.get("ppo")
            kl = [v for v in final_as_pioneer(ppo, "llm1", "kl", cfg).values() if math.isfinite(v)] if ppo else []
            low = bool(kl) and float(np.mean(kl)) < cfg.calibration_kl
            role = ROLES["math"].format(kl=f"{np.mean(kl):.2g}" if kl else "n/a", k=cfg.passk_max_k,
                                        regime=LOW_KL.format(target=cfg.calibration_kl) if low else ".")
        else:
            role = ROLES.get(group, "an IMDB group: the paper's IMDB claims on its base model.")
        prefix = "" if group == "imdb" else f"{group}/"
        mine = [c for c in claims if (c.key.startswith(prefix) if prefix else "/" not in c.key and not c.key.startswith(
            ("math", "passk", "pareto", "mechanism")))]
        if group == "math":
            mine = [c for c in claims if c.key.startswith(("math", "passk"))]
        absent = [c for c in mine if c.absent]
        model = inputs.model_of(group)
        lines.append(f"- `{group}`{f', {model}' if model != group else ''}: {role} Its claims here: {len(mine)}"
                     + (f", {len(absent)} not tested in this profile ({'; '.join(sorted({c.absent for c in absent}))})"
                        if absent else "") + ".")
    return lines + [""]
