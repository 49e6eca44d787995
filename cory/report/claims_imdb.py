"""The paper's IMDB claims (Fig. 3, its collapse, Fig. 6's ablations, cooperative vs competitive), for one IMDB
group."""

from __future__ import annotations

import math

import numpy as np

from cory.report.curves import curve_gap, final_value, reach_iteration, start_value
from cory.report.quantities import (
    COMBINED, Context, ETA_SOURCE, LLMS, Table, _key, difference, drawdown, eta_text, figure_of, final, mean_of, partner_coef, slope,
)
from cory.report.results import Run
from cory.report.stats import clopper_pearson
from cory.report.verdicts import PerSeed, Claim, Effect, RateDifference, fall_factor, ratio


def imdb_claims(imdb: dict[str, Run], ctx: Context) -> list[Claim]:
    """Fig. 3 on one IMDB group: PPO, CORY, and the 2x-parameter PPO model where the group has it; and whether PPO
    collapses where CORY does not."""
    cfg, fig = ctx.cfg, figure_of(ctx, "fig3_imdb.png")
    w, tol = cfg.stability_window, cfg.tolerance
    ppo, cory, ppo2x = imdb["ppo"], imdb["cory"], imdb.get("ppo_2x")
    claims = []

    t = Table()
    p = t.add("PPO final task reward", ppo, final(ppo, "llm1/task_reward", cfg))
    gain = t.add("PPO task-reward gain (final - iteration 0)", ppo,
                 ppo.per_seed("llm1/task_reward", lambda y: final_value(y, cfg.last_n) - y[0]))
    effects = []
    for x in LLMS:
        c = t.add(f"CORY-{x} final task reward", cory, final(cory, _key(x, "task_reward"), cfg))
        effects.append(Effect(f"|CORY-{x} - PPO| / PPO gain", (c, p, gain),
                              lambda c, p, g: ratio(np.abs(np.subtract(c, p)), np.abs(g)), "<=", tol))
    claims.append(ctx.claim(
        "imdb_similar_reward", fig, "PPO and CORY reach similar task reward (Fig. 3a).",
        f"|mean final task reward of CORY-LLMx - PPO's| / |PPO's mean task-reward gain (final - iteration 0)| <= "
        f"{tol:g}, for LLM1 and LLM2; the interval is on that ratio of seed means.", t, effects))

    t = Table()
    p = t.add("PPO final KL", ppo, final(ppo, "llm1/kl", cfg))
    effects = [Effect(f"mean final KL of PPO / CORY-{x}", (p, t.add(f"CORY-{x} final KL", cory,
                                                                    final(cory, _key(x, "kl"), cfg))),
                      ratio, ">", cfg.kl_ratio, (0.0, math.inf)) for x in LLMS]  # a KL is >= 0
    claims.append(ctx.claim(
        "imdb_kl_ratio", fig, "PPO's final KL is more than 2x CORY's (Fig. 3b).",
        f"mean final KL of PPO / mean final KL of CORY-LLMx > {cfg.kl_ratio:g}, for LLM1 and LLM2.", t, effects))

    t = Table()
    effects = [mean_of(f"mean {label} curve gap", t.add(
        f"{label} curve gap LLM1 vs LLM2", cory, {s: curve_gap(a, b, w) for s, (a, b) in _zip(
            cory.curves(f"llm1/{metric}"), cory.curves(f"llm2/{metric}")).items()}), "<=", tol)
        for label, metric in (("task-reward", "task_reward"), ("KL", "kl"))]
    claims.append(ctx.claim(
        "imdb_llms_coincide", fig, "The CORY-LLM1 and CORY-LLM2 curves nearly coincide (Fig. 3).",
        f"mean curve gap over seeds <= {tol:g}, for task reward and for KL; gap = mean |LLM1 - LLM2| of one seed's "
        f"curves smoothed over {w} iterations, divided by the span (max - min) of their smoothed average.", t, effects))

    t = Table()
    eta = eta_text({"PPO": ppo, "CORY": cory})
    effects = [mean_of("mean PPO combined-reward slope", t.add(
        "PPO combined-reward slope", ppo, slope(ppo, "llm1/combined_reward")), "<", 0.0)]
    effects += [mean_of(f"mean CORY-{x} combined-reward slope", t.add(
        f"CORY-{x} combined-reward slope", cory, slope(cory, _key(x, "combined_reward"))), ">", 0.0) for x in LLMS]
    for who, run, key in (("PPO", ppo, "llm1"), ("PPO-2x", ppo2x, "llm1"), ("CORY-LLM1", cory, "llm1"),
                          ("CORY-LLM2", cory, "llm2")):
        if run is not None:  # shown beside the paper's end points, not tested here
            t.add(f"{who} final combined reward", run, final(run, f"{key}/combined_reward", cfg))
    claims.append(ctx.claim(
        "imdb_combined_reward", fig, "CORY's combined reward keeps rising while PPO's falls (Fig. 3c).",
        f"mean least-squares slope of the {COMBINED} ({eta}; {ETA_SOURCE}) over the second half of training: > 0 "
        "for CORY-LLM1 and CORY-LLM2, < 0 for PPO.", t, effects))
    claims.append(combined_fall_claim(ppo, cory, ppo2x, ctx))
    claims.append(collapse_claim(ppo, cory, ctx))

    if ppo2x is not None:
        def reach(run: Run) -> PerSeed:
            return run.per_seed("llm1/task_reward", lambda y: reach_iteration(y, w, cfg.last_n))

        t = Table()
        fast = t.add("PPO-2x iterations to 90% of its task-reward gain", ppo2x, reach(ppo2x))
        small = t.add("PPO iterations to 90% of its task-reward gain", ppo, reach(ppo))
        kl = t.add("PPO-2x KL slope (second half)", ppo2x, slope(ppo2x, "llm1/kl"))
        t.add("PPO-2x final combined reward", ppo2x, final(ppo2x, "llm1/combined_reward", cfg))
        claims.append(ctx.claim(
            "imdb_2x_model", fig,
            "The 2x-parameter model (GPT2-XL) reaches its maximum task reward fast, but its KL keeps rising (Fig. 3).",
            f"PPO-2x's task reward (smoothed over {w} iterations) makes 90% of its gain no later than PPO's does (mean "
            "iterations of PPO-2x - PPO's <= 0), and PPO-2x's KL has a positive mean slope over the second half of "
            "training.", t, [difference("PPO-2x - PPO iterations to 90% of the gain", fast, small, "<=", 0.0),
                             mean_of("mean PPO-2x KL slope", kl, ">", 0.0)]))
    return claims


def _zip(a: PerSeed, b: PerSeed) -> dict:
    """seed -> (a[seed], b[seed]) for every seed both have: two quantities of one run."""
    return {s: (a[s], b[s]) for s in sorted(a.keys() & b.keys())}


def combined_fall_claim(ppo: Run, cory: Run, ppo2x: Run | None, ctx: Context) -> Claim:
    """Fig. 3c on IMDB as its curves read: both combined rewards fall, CORY's several times less than PPO's."""
    cfg = ctx.cfg
    n = cfg.last_n
    t = Table()
    falls = {}
    for who, run, key in (("PPO", ppo, "llm1"), ("PPO-2x", ppo2x, "llm1"), ("CORY-LLM1", cory, "llm1"),
                          ("CORY-LLM2", cory, "llm2")):
        if run is None:
            continue
        start = run.per_seed(f"{key}/combined_reward", lambda y: start_value(y, n))
        end = final(run, f"{key}/combined_reward", cfg)
        t.add(f"{who} start combined reward", run, start)
        t.add(f"{who} final combined reward", run, end)
        falls[who] = t.add(f"{who} fall (start - final)", run, {s: start[s] - end[s] for s in sorted(start)})
    effects = [Effect(f"PPO's fall / CORY-{x}'s fall", (falls["PPO"], falls[f"CORY-{x}"]), fall_factor, ">",
                      cfg.fall_ratio) for x in LLMS]
    runs = {"PPO": ppo, "CORY": cory} | ({"PPO-2x": ppo2x} if ppo2x is not None else {})
    return ctx.claim(
        "imdb_combined_fall", figure_of(ctx, "fig3_imdb.png"),
        "CORY's combined reward falls several times less than PPO's (Fig. 3c: about 7x less, read off the figure).",
        f"fall of the {COMBINED} ({eta_text(runs)}) = mean over the first {n} iterations - mean over the last {n} "
        f"(the final value); mean fall of PPO / mean fall of CORY-LLMx > {cfg.fall_ratio:g}, for LLM1 and LLM2 (a "
        "CORY whose combined reward does not fall at all, while PPO's does, passes; PPO-2x is shown, not tested).",
        t, effects)


def collapse_claim(ppo: Run, cory: Run, ctx: Context) -> Claim:
    """The paper's IMDB result lives where single-agent PPO collapses (KL in the tens) and CORY does
    not. A seed collapses when its final KL exceeds report.collapse_kl; the effect is the difference of collapse
    rates, with an exact interval (a bootstrap of the rates of 3 seeds that agree would be a point)."""
    cfg = ctx.cfg
    limit, conf = cfg.collapse_kl, cfg.confidence
    t = Table()
    collapsed = {}
    for who, run, key in (("PPO", ppo, "llm1"), ("CORY-LLM1", cory, "llm1"), ("CORY-LLM2", cory, "llm2")):
        kl = t.add(f"{who} final KL", run, final(run, f"{key}/kl", cfg))
        collapsed[who] = t.add(f"{who} collapsed (final KL > {limit:g}: 1, else 0)", run,
                               {s: float(v > limit) if math.isfinite(v) else math.nan
                                for s, v in t.quantities[kl].items()})
    notes = []
    for who, label in collapsed.items():
        values = [v for v in t.quantities[label].values() if math.isfinite(v)]
        k, n = int(sum(values)), len(values)
        low, high = clopper_pearson(k, n, conf)
        notes.append(f"{who} collapsed on {k} of {n} seeds (rate {k / n if n else math.nan:.2f}; {conf:.0%} "
                     f"Clopper-Pearson interval [{low:.2f}, {high:.2f}]).")
    ppo_kl = [v for v in t.quantities["PPO final KL"].values() if math.isfinite(v)]
    target = cfg.calibration_kl
    met = bool(ppo_kl) and all(v >= target for v in ppo_kl)
    notes.append(f"Calibration target (PPO's final KL >= {target:g} on every seed, report.calibration_kl; the regime "
                 f"of the paper's IMDB result): {'met' if met else 'not met'}; PPO's final KL per seed: "
                 + ", ".join(f"{s}: {v:.3g}" for s, v in sorted(t.quantities["PPO final KL"].items())) + ".")
    effects = [RateDifference(f"collapse rate PPO - CORY-{x}", (collapsed["PPO"], collapsed[f"CORY-{x}"]),
                              lambda a, b: a - b, ">", 0.0) for x in LLMS]
    return ctx.claim(
        "imdb_collapse", figure_of(ctx, "fig3_imdb.png"),
        "Single-agent PPO collapses on IMDB while CORY does not (Fig. 3: PPO's KL in the tens by iteration 100).",
        f"a seed collapses when its final KL (mean over the last {cfg.last_n} iterations) exceeds {limit:g} "
        "(report.collapse_kl); collapse rate of PPO - collapse rate of CORY-LLMx > 0, for LLM1 and LLM2. The interval "
        "of the difference is exact: where a one-sided exact unconditional test of the rate difference stops "
        "rejecting, at each end (3 of 3 seeds against 0 of 3 clears 0 at 95%; 2 of 3 against 0 of 3 does not).",
        t, effects, notes)




def ablation_claims(imdb: dict[str, Run], ctx: Context) -> list[Claim]:
    """Fig. 6: CORY without knowledge transfer (KT) and without role exchange (REx), IMDB, where the group has
    those runs."""
    cfg, fig = ctx.cfg, figure_of(ctx, "fig6_ablations.png")
    cory, no_kt, no_rex = imdb["cory"], imdb.get("cory_no_kt"), imdb.get("cory_no_rex")
    claims = []
    if no_kt is not None:
        both = (("CORY", cory), ("w/o KT", no_kt))
        t = Table()
        kl = {(name, x): t.add(f"{name} {x} final KL", run, final(run, _key(x, "kl"), cfg))
              for x in LLMS for name, run in both}
        for x in LLMS:
            for name, run in both:
                t.add(f"{name} {x} final combined reward", run, final(run, _key(x, "combined_reward"), cfg))
        claims.append(ctx.claim(
            "no_kt_kl", fig, "Without knowledge transfer (KT), KL is higher than CORY's (Fig. 6).",
            "mean final KL of CORY w/o KT - CORY's > 0, for LLM1 and for LLM2.", t,
            [difference(f"w/o KT - CORY {x} final KL", kl["w/o KT", x], kl["CORY", x]) for x in LLMS]))

        t = Table()
        dd = {(name, x): t.add(f"{name} {x} max drawdown of task reward", run,
                               drawdown(run, _key(x, "task_reward"), cfg)) for x in LLMS for name, run in both}
        claims.append(ctx.claim(
            "no_kt_unstable", fig, "Without knowledge transfer, the task reward is unstable (Fig. 6).",
            f"max drawdown of the task reward smoothed over {cfg.stability_window} iterations, seed means: CORY w/o "
            "KT's - CORY's > 0, for LLM1 and LLM2.", t,
            [difference(f"w/o KT - CORY {x} max drawdown", dd["w/o KT", x], dd["CORY", x]) for x in LLMS]))

    if no_rex is not None:
        # Without role exchange LLM1 is always the pioneer: the role columns are the two models.
        t = Table()
        reference = t.add("CORY final KL (mean of LLM1 and LLM2)", cory, {
            s: (a + b) / 2 for s, (a, b) in _zip(final(cory, "llm1/kl", cfg), final(cory, "llm2/kl", cfg)).items()})
        pioneer = t.add("w/o REx pioneer final KL", no_rex, final(no_rex, "pioneer/kl", cfg))
        observer = t.add("w/o REx observer final KL", no_rex, final(no_rex, "observer/kl", cfg))
        for role, x in (("pioneer", "LLM1"), ("observer", "LLM2")):
            t.add(f"w/o REx {role} ({x}) final combined reward", no_rex, final(no_rex, _key(x, "combined_reward"), cfg))
        for x in LLMS:
            t.add(f"CORY {x} final combined reward", cory, final(cory, _key(x, "combined_reward"), cfg))
        claims.append(ctx.claim(
            "no_rex_kl", fig, "Without role exchange (REx), both models end with much higher KL than CORY (Fig. 6).",
            "mean final KL of the w/o-REx pioneer and of the w/o-REx observer each above CORY's (the mean of LLM1 "
            "and LLM2): each difference > 0.", t,
            [difference("w/o REx pioneer - CORY final KL", pioneer, reference),
             difference("w/o REx observer - CORY final KL", observer, reference)]))
        rex = Table({k: t.quantities[k] for k in t.quantities if k.startswith("w/o REx")},
                    {k: t.runs[k] for k in t.runs if k.startswith("w/o REx")})
        claims.append(ctx.claim(
            "no_rex_observer", fig, "Without role exchange, the observer's KL is well below the pioneer's (Fig. 6).",
            "mean final KL of the w/o-REx pioneer - the w/o-REx observer's > 0 (one run: its seeds resampled as "
            "pairs).", rex, [difference("w/o REx pioneer - observer final KL", pioneer, observer)]))
    return claims


def cooperation_claims(imdb: dict[str, Run], ctx: Context) -> list[Claim]:
    """Cooperative vs competitive partner reward (camera-ready appendix), IMDB, LLM1, where the group has it."""
    cfg, cory, comp = ctx.cfg, imdb["cory"], imdb.get("cory_competitive")
    if comp is None:
        return []
    coefs = f"c = {partner_coef(cory):g} vs c = {partner_coef(comp):g}"
    claims = []
    for metric, key, better, sign in (("task reward", "task_reward", "higher", 1), ("KL", "kl", "lower", -1)):
        t = Table()
        coop = t.add(f"cooperative LLM1 final {metric}", cory, final(cory, f"llm1/{key}", cfg))
        competitive = t.add(f"competitive LLM1 final {metric}", comp, final(comp, f"llm1/{key}", cfg))
        effect = (difference(f"cooperative - competitive final {metric}", coop, competitive) if sign > 0
                  else difference(f"competitive - cooperative final {metric}", competitive, coop))
        claims.append(ctx.claim(
            f"coop_{key}", figure_of(ctx, "fig_coop_vs_comp.png"),
            f"A cooperative partner reward gives LLM1 {better} {metric} than a competitive one "
            "(camera-ready appendix).",
            f"mean final {metric} of LLM1 {better} with the cooperative than with the competitive partner reward "
            f"({coefs}): the difference's interval clears 0.", t, [effect]))
    return claims
