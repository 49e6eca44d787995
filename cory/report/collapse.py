"""Collapse by behaviour: whether a seed's policy ended degenerate, read from what it does rather than from one KL
cut-off (a summed KL of 20 calls SmolLM2's fluent text collapsed and is another model's scale). A seed is degenerate
when any of four behaviours shows at its end (params report.collapse): its batch's distinct-2 fell below a share of
its start; its per-token entropy fell below a share of its start; its task reward fell from its peak by more than a
share of what it had gained; or its answers leak chat-template tokens. Final KL above report.collapse_kl is shown
beside them, not counted. The claim tests each method's own rate (Clopper-Pearson) and the difference."""

from __future__ import annotations

import math

import numpy as np

from cory.report.curves import final_value, peak
from cory.report.quantities import LLMS, Context, Table, final_as_pioneer, figure_of
from cory.report.rates import clopper_pearson
from cory.report.results import Run
from cory.report.verdicts import Claim, PerSeed, Rate, RateDifference

BEHAVIOURS = ("distinct_2", "entropy", "reward_fall", "leakage")
"""The signals whose any makes a seed degenerate (report.collapse); "kl" is shown beside them."""


def end_answers(run: Run, seed: int, llm: str) -> list[str]:
    """`llm`'s answers at the end of one seed: its responses (either role) in the last training iteration's samples
    and alone after training (samples.jsonl)."""
    rows = run.samples_by_seed.get(seed, [])
    if not rows:
        return []
    last = max(r["iteration"] for r in rows)
    ends = {last, last - 1}
    return [r[f"{role}_response"] for r in rows if r["iteration"] in ends
            for role in ("pioneer", "observer") if r.get(f"{role}_agent") == llm and f"{role}_response" in r]


def leakage(answers: list[str], tokens: list[str]) -> float:
    """The share of `answers` holding any of `tokens` (NaN without answers)."""
    if not answers:
        return math.nan
    return sum(any(t in a for t in tokens) for a in answers) / len(answers)


def measures(run: Run, llm: str, ctx: Context) -> dict[str, PerSeed]:
    """seed -> each behaviour's measured value for `llm`: final distinct-2 and entropy over their iteration-0 values,
    the reward's fall from its smoothed peak over its rise, the share of end answers that leak, the final KL (as
    pioneer)."""
    cfg = ctx.cfg
    n, w = cfg.last_n, cfg.stability_window

    def ratio_to_start(metric: str) -> PerSeed:
        return run.per_seed(f"{llm}/{metric}", lambda y: final_value(y, n) / y[0] if y[0] > 0 else math.nan)

    def fall_share(y: np.ndarray) -> float:
        _, rise, fall = peak(y, w, n)
        return fall / rise if rise > 0 else 0.0

    return {"distinct_2": ratio_to_start("distinct_2"), "entropy": ratio_to_start("entropy"),
            "reward_fall": run.per_seed(f"{llm}/task_reward", fall_share),
            "leakage": {s: leakage(end_answers(run, s, llm), cfg.collapse.template_tokens) for s in run.seeds},
            "kl": final_as_pioneer(run, llm, "kl", cfg)}


SIGNAL_TEXT = {
    "distinct_2": ("diversity lost", "final distinct-2 / iteration 0's", "<"),
    "entropy": ("entropy lost", "final entropy / iteration 0's", "<"),
    "reward_fall": ("reward collapsed", "task reward's fall from its peak / its rise", ">"),
    "leakage": ("template leakage", "share of end answers with a template token", ">="),
    "kl": ("KL above report.collapse_kl", "final KL (as pioneer)", ">"),
}
"""signal -> (its name, the measured value, the side that fires it)."""


def fires(signal: str, value: float, ctx: Context) -> float:
    """1.0 where the measured value shows the behaviour, 0.0 where not, NaN where unmeasured."""
    if not math.isfinite(value):
        return math.nan
    limit = ctx.cfg.collapse_kl if signal == "kl" else getattr(ctx.cfg.collapse, signal)
    side = SIGNAL_TEXT[signal][2]
    return float(value < limit if side == "<" else value > limit if side == ">" else value >= limit)


def degenerate(flags: dict[str, PerSeed]) -> PerSeed:
    """seed -> 1.0 where any measured behaviour fires, 0.0 where none does, NaN where none was measured."""
    seeds = sorted(set().union(*(f.keys() for f in flags.values())))
    out = {}
    for s in seeds:
        known = [flags[b][s] for b in BEHAVIOURS if math.isfinite(flags[b].get(s, math.nan))]
        out[s] = float(max(known)) if known else math.nan
    return out


def rate_text(values: PerSeed, confidence: float) -> str:
    """"3 of 9 [0.07, 0.70]": how many finite seeds are 1, with the Clopper-Pearson interval."""
    finite = [v for v in values.values() if math.isfinite(v)]
    k, n = int(sum(finite)), len(finite)
    low, high = clopper_pearson(k, n, confidence)
    return f"{k} of {n} [{low:.2f}, {high:.2f}]"


def collapse_claim(ppo: Run, cory: Run, ctx: Context) -> Claim:
    """The paper's IMDB result lives where single-agent PPO collapses and CORY does not: each method's rate of
    degenerate seeds against report.collapse.rate, and PPO's rate above each CORY LLM's."""
    cfg = ctx.cfg
    c, conf = cfg.collapse, cfg.confidence
    t = Table()
    flags: dict[str, dict[str, PerSeed]] = {}
    collapsed = {}
    for who, run, llm in (("PPO", ppo, "llm1"), ("CORY-LLM1", cory, "llm1"), ("CORY-LLM2", cory, "llm2")):
        values = measures(run, llm, ctx)
        flags[who] = {}
        for signal, by_seed in values.items():
            t.add(f"{who} {SIGNAL_TEXT[signal][1]}", run, by_seed)
            flags[who][signal] = {s: fires(signal, v, ctx) for s, v in by_seed.items()}
        collapsed[who] = t.add(f"{who} degenerate (1: any behaviour)", run, degenerate(flags[who]))
    notes = [f"{SIGNAL_TEXT[signal][0]} ({SIGNAL_TEXT[signal][1]} {SIGNAL_TEXT[signal][2]} "
             f"{cfg.collapse_kl if signal == 'kl' else getattr(c, signal):g}): "
             + "; ".join(f"{who} {rate_text(flags[who][signal], conf)}" for who in flags)
             for signal in (*BEHAVIOURS, "kl")]
    notes.append("degenerate (any of the first four): " + "; ".join(
        f"{who} {rate_text(t.quantities[label], conf)}" for who, label in collapsed.items()) + " (seeds, "
        f"{conf:.0%} Clopper-Pearson interval of the rate).")
    ppo_kl = [v for v in measures(ppo, "llm1", ctx)["kl"].values() if math.isfinite(v)]
    met = bool(ppo_kl) and all(v >= cfg.calibration_kl for v in ppo_kl)
    notes.append(f"Calibration target (PPO's final KL >= {cfg.calibration_kl:g} on every seed, report.calibration_kl: "
                 f"the regime of the paper's IMDB result): {'met' if met else 'not met'}.")
    effects = [Rate("PPO rate of degenerate seeds", (collapsed["PPO"],),
                    magnitude=f"PPO collapses: its rate of degenerate seeds is above {c.rate:g}", op=">",
                    threshold=c.rate)]
    for x in LLMS:
        effects.append(Rate(f"CORY-{x} rate of degenerate seeds", (collapsed[f"CORY-{x}"],),
                            magnitude=f"CORY-{x} does not: its rate is below {c.rate:g}", op="<", threshold=c.rate))
        effects.append(RateDifference(f"PPO - CORY-{x} rate of degenerate seeds",
                                      (collapsed["PPO"], collapsed[f"CORY-{x}"]),
                                      direction=f"PPO's rate is above CORY-{x}'s"))
    tokens = ", ".join(f"`{x}`" for x in c.template_tokens)
    return ctx.claim(
        "imdb_collapse", figure_of(ctx, "fig3_imdb.png"),
        "Single-agent PPO collapses on IMDB while CORY does not (Fig. 3, the paper's Table 3 samples).",
        f"a seed is degenerate when, at its end (final value: the mean over the last {cfg.last_n} iterations), any of: "
        f"its batch distinct-2 is below {c.distinct_2:g} x its iteration-0 value; its entropy per token below "
        f"{c.entropy:g} x its iteration-0 value; its task reward (smoothed over {cfg.stability_window}) fell from its "
        f"peak by more than {c.reward_fall:g} x its rise; at least {c.leakage:g} of its end answers hold a template "
        f"token ({tokens}). The claim needs PPO's rate of degenerate seeds above {c.rate:g} (Clopper-Pearson "
        f"interval), each CORY LLM's below {c.rate:g}, and PPO's above each CORY LLM's (the exact interval of the "
        "difference). The "
        f"final KL above {cfg.collapse_kl:g} (report.collapse_kl) is shown, not counted.", t, effects, notes)
