"""The paper's IMDB claims (Fig. 3, its collapse, Fig. 6's ablations, cooperative vs competitive), for one IMDB
group. A comparison of CORY's KL or task reward with PPO's reads CORY's in the pioneer role (`final_as_pioneer`): an
observer's KL is taken on another prompt, the pioneer's answer in context."""

from __future__ import annotations

import math

from cory.report.collapse import collapse_claim
from cory.report.curves import curve_gap, final_value, reach_iteration, start_value
from cory.report.quantities import (
    COMBINED, ETA_SOURCE, LLMS, Context, Table, _key, difference, drawdown, eta_text, figure_of, final,
    final_as_pioneer, mean_of, partner_coef, slope,
)
from cory.report.results import Run
from cory.report.verdicts import Claim, Effect, PerSeed, Similar


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
        c = t.add(f"CORY-{x} final task reward (as pioneer)", cory, final_as_pioneer(cory, x.lower(), "task_reward",
                                                                                  cfg))
        effects.append(Similar(f"CORY-{x} - PPO final task reward", (c, p),
                               magnitude=f"CORY-{x}'s final task reward is within {tol:g} x PPO's gain of PPO's",
                               scale=gain, share=tol))
    claims.append(ctx.claim(
        "imdb_similar_reward", fig, "PPO and CORY reach similar task reward (Fig. 3a).",
        f"the signed difference of mean final task rewards, CORY-LLMx (as pioneer) - PPO, lies within +-{tol:g} x "
        "PPO's mean task-reward gain (final - iteration 0; the margin taken as known) by two one-sided tests: its "
        f"{cfg.confidence:.0%} interval inside the margins, for LLM1 and LLM2.", t, effects))

    t = Table()
    p = t.add("PPO final KL", ppo, final(ppo, "llm1/kl", cfg))
    effects = [Effect(f"PPO / CORY-{x} final KL", (p, t.add(f"CORY-{x} final KL (as pioneer)", cory,
                                                            final_as_pioneer(cory, x.lower(), "kl", cfg))),
                      ratio=True, direction=f"CORY-{x}'s final KL is lower than PPO's",
                      magnitude=f"PPO's final KL is more than {cfg.kl_ratio:g}x CORY-{x}'s", op=">",
                      threshold=cfg.kl_ratio, bounds=(0.0, math.inf)) for x in LLMS]
    for x in LLMS:  # each agent's KL over both roles, shown
        t.add(f"CORY-{x} final KL (both roles)", cory, final(cory, _key(x, "kl"), cfg))
    claims.append(ctx.claim(
        "imdb_kl_ratio", fig, "PPO's final KL is more than 2x CORY's (Fig. 3b).",
        f"mean final KL of PPO / that of CORY-LLMx as pioneer (its last {cfg.last_n} iterations in that role), for LLM1 "
        f"and LLM2: lower (direction), and more than {cfg.kl_ratio:g}x lower (magnitude, on the log scale).",
        t, effects))

    t = Table()
    effects = [mean_of(f"mean {label} curve gap", t.add(
        f"{label} curve gap LLM1 vs LLM2", cory, {s: curve_gap(a, b, w) for s, (a, b) in _zip(
            cory.curves(f"llm1/{metric}"), cory.curves(f"llm2/{metric}")).items()}),
        f"the LLM1 and LLM2 {label} curves lie within {tol:g} of their span", "<=", tol, (0.0, math.inf))
        for label, metric in (("task-reward", "task_reward"), ("KL", "kl"))]
    claims.append(ctx.claim(
        "imdb_llms_coincide", fig, "The CORY-LLM1 and CORY-LLM2 curves nearly coincide (Fig. 3).",
        f"mean curve gap over seeds <= {tol:g}, for task reward and for KL; gap = mean |LLM1 - LLM2| of one seed's "
        f"curves smoothed over {w} iterations, divided by the span (max - min) of their smoothed average.", t, effects))

    t = Table()
    eta = eta_text({"PPO": ppo, "CORY": cory})
    effects = [mean_of("mean PPO combined-reward slope", t.add(
        "PPO combined-reward slope", ppo, slope(ppo, "llm1/combined_reward")),
        "PPO's combined reward falls over the second half", "<", 0.0)]
    effects += [mean_of(f"mean CORY-{x} combined-reward slope", t.add(
        f"CORY-{x} combined-reward slope", cory, slope(cory, _key(x, "combined_reward"))),
        f"CORY-{x}'s combined reward rises over the second half", ">", 0.0) for x in LLMS]
    for who, run, key in (("PPO", ppo, "llm1"), ("PPO-2x", ppo2x, "llm1"), ("CORY-LLM1", cory, "llm1"),
                          ("CORY-LLM2", cory, "llm2")):
        if run is not None:  # shown beside the paper's end points, not tested here
            t.add(f"{who} final combined reward", run, final(run, f"{key}/combined_reward", cfg))
    claims.append(ctx.claim(
        "imdb_combined_reward", fig, "CORY's combined reward keeps rising while PPO's falls (Fig. 3c).",
        f"mean least-squares slope of the {COMBINED} ({eta}; {ETA_SOURCE}) over the second half of training: > 0 "
        "for CORY-LLM1 and CORY-LLM2, < 0 for PPO (each run's t interval).", t, effects))
    claims.append(combined_fall_claim(ppo, cory, ppo2x, ctx))
    claims.append(collapse_claim(ppo, cory, ctx))

    paper = "The 2x-parameter model (GPT2-XL) reaches its maximum task reward fast, but its KL keeps rising (Fig. 3)."
    if ppo2x is None:
        claims.append(ctx.absent("imdb_2x_model", paper, "the group has no run ppo_2x"))
        return claims

    def reach(run: Run) -> PerSeed:
        return run.per_seed("llm1/task_reward", lambda y: reach_iteration(y, w, cfg.last_n))

    t = Table()
    fast = t.add("PPO-2x iterations to 90% of its task-reward gain", ppo2x, reach(ppo2x))
    small = t.add("PPO iterations to 90% of its task-reward gain", ppo, reach(ppo))
    kl = t.add("PPO-2x KL slope (second half)", ppo2x, slope(ppo2x, "llm1/kl"))
    t.add("PPO-2x final combined reward", ppo2x, final(ppo2x, "llm1/combined_reward", cfg))
    claims.append(ctx.claim(
        "imdb_2x_model", fig, paper,
        f"PPO-2x's task reward (smoothed over {w} iterations) makes 90% of its gain sooner than PPO's does (the "
        "difference of iterations, PPO-2x - PPO, below 0), and PPO-2x's KL has a positive mean slope over the second "
        "half of training.", t,
        [difference("PPO-2x - PPO iterations to 90% of the gain", fast, small,
                    "PPO-2x reaches 90% of its gain sooner than PPO", "<"),
         mean_of("mean PPO-2x KL slope", kl, "PPO-2x's KL rises over the second half", ">", 0.0)]))
    return claims


def _zip(a: PerSeed, b: PerSeed) -> dict:
    """seed -> (a[seed], b[seed]) for every seed both have: two quantities of one run."""
    return {s: (a[s], b[s]) for s in sorted(a.keys() & b.keys())}


def combined_fall_claim(ppo: Run, cory: Run, ppo2x: Run | None, ctx: Context) -> Claim:
    """Fig. 3c on IMDB as its curves read: both combined rewards fall, CORY's several times less than PPO's. The
    ratio of falls is tested as the linear contrast PPO's fall - r x CORY's > 0 (Fieller's way), so a CORY whose
    combined reward does not fall, or rises, is no division by 0."""
    cfg = ctx.cfg
    n, r = cfg.last_n, cfg.fall_ratio
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
    effects = []
    for x in LLMS:
        pair = (falls["PPO"], falls[f"CORY-{x}"])
        effects += [Effect(f"PPO's fall - CORY-{x}'s", pair, direction=f"CORY-{x}'s combined reward falls less than "
                           "PPO's"),
                    Effect(f"PPO's fall - {r:g} x CORY-{x}'s", pair, (1.0, -r),
                           magnitude=f"PPO's fall is more than {r:g}x CORY-{x}'s", op=">", threshold=0.0)]
    runs = {"PPO": ppo, "CORY": cory} | ({"PPO-2x": ppo2x} if ppo2x is not None else {})
    return ctx.claim(
        "imdb_combined_fall", figure_of(ctx, "fig3_imdb.png"),
        "CORY's combined reward falls several times less than PPO's (Fig. 3c: about 7x less, read off the figure).",
        f"fall of the {COMBINED} ({eta_text(runs)}) = mean over the first {n} iterations - mean over the last {n} "
        f"(the final value); PPO's fall above CORY-LLMx's (direction), and PPO's fall - {r:g} x CORY-LLMx's > 0 "
        f"(magnitude: more than {r:g}x), for LLM1 and LLM2 (PPO-2x is shown, not tested).", t, effects)


NO_KT = "Without knowledge transfer (KT), KL is higher than CORY's (Fig. 6)."
NO_KT_UNSTABLE = "Without knowledge transfer, the task reward is unstable (Fig. 6)."
NO_REX = "Without role exchange (REx), both models end with much higher KL than CORY (Fig. 6)."
NO_REX_OBSERVER = "Without role exchange, the observer's KL is well below the pioneer's (Fig. 6)."


def ablation_claims(imdb: dict[str, Run], ctx: Context) -> list[Claim]:
    """Fig. 6: CORY without knowledge transfer (KT) and without role exchange (REx), IMDB; "not tested in this
    profile" where the group lacks the run."""
    cfg, fig = ctx.cfg, figure_of(ctx, "fig6_ablations.png")
    cory, no_kt, no_rex = imdb["cory"], imdb.get("cory_no_kt"), imdb.get("cory_no_rex")
    claims = []
    if no_kt is None:
        claims += [ctx.absent(key, paper, "the group has no run cory_no_kt")
                   for key, paper in (("no_kt_kl", NO_KT), ("no_kt_unstable", NO_KT_UNSTABLE))]
    else:
        both = (("CORY", cory), ("w/o KT", no_kt))
        t = Table()
        kl = {(name, x): t.add(f"{name} {x} final KL (as pioneer)", run, final_as_pioneer(run, x.lower(), "kl", cfg))
              for x in LLMS for name, run in both}
        for x in LLMS:
            for name, run in both:
                t.add(f"{name} {x} final combined reward", run, final(run, _key(x, "combined_reward"), cfg))
        claims.append(ctx.claim(
            "no_kt_kl", fig, NO_KT, "mean final KL (as pioneer) of CORY w/o KT above CORY's, for LLM1 and LLM2.", t,
            [difference(f"w/o KT - CORY {x} final KL", kl["w/o KT", x], kl["CORY", x],
                        f"{x}'s final KL is higher without KT") for x in LLMS]))

        t = Table()
        dd = {(name, x): t.add(f"{name} {x} max drawdown of task reward", run,
                               drawdown(run, _key(x, "task_reward"), cfg)) for x in LLMS for name, run in both}
        claims.append(ctx.claim(
            "no_kt_unstable", fig, NO_KT_UNSTABLE,
            f"max drawdown of the task reward smoothed over {cfg.stability_window} iterations: CORY w/o KT's above "
            "CORY's, for LLM1 and LLM2.", t,
            [difference(f"w/o KT - CORY {x} max drawdown", dd["w/o KT", x], dd["CORY", x],
                        f"{x}'s task reward draws down more without KT") for x in LLMS]))

    if no_rex is None:
        claims += [ctx.absent(key, paper, "the group has no run cory_no_rex")
                   for key, paper in (("no_rex_kl", NO_REX), ("no_rex_observer", NO_REX_OBSERVER))]
        return claims
    # Without role exchange LLM1 is always the pioneer: the role columns are the two models. Each is read against
    # CORY's same role (an observer's KL is taken on another prompt than a pioneer's).
    t = Table()
    roles = {}
    for role, x in (("pioneer", "LLM1"), ("observer", "LLM2")):
        roles[role] = (t.add(f"w/o REx {role} final KL", no_rex, final(no_rex, f"{role}/kl", cfg)),
                       t.add(f"CORY {role} role final KL", cory, final(cory, f"{role}/kl", cfg)))
        t.add(f"w/o REx {role} ({x}) final combined reward", no_rex, final(no_rex, _key(x, "combined_reward"), cfg))
    for x in LLMS:
        t.add(f"CORY {x} final combined reward", cory, final(cory, _key(x, "combined_reward"), cfg))
    claims.append(ctx.claim(
        "no_rex_kl", fig, NO_REX,
        "mean final KL of the w/o-REx pioneer above that of CORY's pioneer role, and of the w/o-REx observer above "
        "that of CORY's observer role.", t,
        [difference(f"w/o REx - CORY {role} final KL", *roles[role], f"the {role}'s final KL is higher without REx")
         for role in roles]))
    rex = Table({k: t.quantities[k] for k in t.quantities if k.startswith("w/o REx")},
                {k: t.runs[k] for k in t.runs if k.startswith("w/o REx")})
    claims.append(ctx.claim(
        "no_rex_observer", fig, NO_REX_OBSERVER,
        "mean final KL of the w/o-REx pioneer above the w/o-REx observer's (one run: paired by seed).", rex,
        [difference("w/o REx pioneer - observer final KL", roles["pioneer"][0], roles["observer"][0],
                    "the observer's final KL is below the pioneer's")]))
    return claims


def cooperation_claims(imdb: dict[str, Run], ctx: Context) -> list[Claim]:
    """Cooperative vs competitive partner reward (camera-ready appendix), IMDB, LLM1 as pioneer; "not tested in this
    profile" where the group lacks the competitive run."""
    cfg, cory, comp = ctx.cfg, imdb["cory"], imdb.get("cory_competitive")
    claims = []
    for metric, key, better in (("task reward", "task_reward", "higher"), ("KL", "kl", "lower")):
        paper = (f"A cooperative partner reward gives LLM1 {better} {metric} than a competitive one "
                 "(camera-ready appendix).")
        if comp is None:
            claims.append(ctx.absent(f"coop_{key}", paper, "the group has no run cory_competitive"))
            continue
        t = Table()
        coop = t.add(f"cooperative LLM1 final {metric} (as pioneer)", cory, final_as_pioneer(cory, "llm1", key, cfg))
        competitive = t.add(f"competitive LLM1 final {metric} (as pioneer)", comp,
                            final_as_pioneer(comp, "llm1", key, cfg))
        effect = (difference(f"cooperative - competitive final {metric}", coop, competitive,
                             f"LLM1's final {metric} is {better} with the cooperative partner reward")
                  if better == "higher" else
                  difference(f"competitive - cooperative final {metric}", competitive, coop,
                             f"LLM1's final {metric} is {better} with the cooperative partner reward"))
        coefs = f"c = {partner_coef(cory):g} vs c = {partner_coef(comp):g}"
        claims.append(ctx.claim(
            f"coop_{key}", figure_of(ctx, "fig_coop_vs_comp.png"), paper,
            f"mean final {metric} of LLM1 as pioneer {better} with the cooperative than with the competitive partner "
            f"reward ({coefs}).", t, [effect]))
    return claims
