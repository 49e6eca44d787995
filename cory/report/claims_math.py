"""The paper's math claims (Fig. 4 on the training curves, Fig. 5's pass@k) and the frontier of Fig. 2c on either
task's KL-coefficient sweep (the report's decision rule, cory.report.mechanism, on the sweep's runs)."""

from __future__ import annotations

import math

from cory.report.curves import NOISE_QUANTILE, noise_fall, peak
from cory.report.mechanism import frontier_claim
from cory.report.quantities import (
    COMBINED, Context, ETA_SOURCE, LLMS, Table, _key, difference, drawdown, eta_text, final, final_as_pioneer, mean_of,
    slope,
)
from cory.report.results import SWEEP_TASKS, Run, Sweep
from cory.report.verdicts import Claim, Effect


def math_claims(maths: dict[str, Run], ctx: Context) -> list[Claim]:
    """Fig. 4: PPO and CORY on the math task (GSM8K in the paper)."""
    cfg = ctx.cfg
    w, n = cfg.stability_window, cfg.last_n
    ppo, cory = maths["ppo"], maths["cory"]
    task = "Math (GSM8K in the paper)"
    claims = []

    length = min(len(h) for h in ppo.histories.values())
    t = Table()
    curves = ppo.curves("llm1/task_reward")
    peaks = {s: peak(y, w, n) for s, y in curves.items()}
    noise = {s: noise_fall(y, w, n) for s, y in curves.items()}
    top = t.add("PPO peak iteration (smoothed task reward)", ppo, {s: v[0] for s, v in peaks.items()})
    rise = t.add("PPO rise: peak - smoothed start", ppo, {s: v[1] for s, v in peaks.items()})
    t.add("PPO fall: peak - final value", ppo, {s: v[2] for s, v in peaks.items()})
    t.add(f"PPO fall batch noise alone reaches ({NOISE_QUANTILE:g} quantile)", ppo, noise)
    excess = t.add(f"PPO fall beyond max({cfg.decline:g} x rise, batch noise)", ppo,
                   {s: fall - max(cfg.decline * up, noise[s]) for s, (_, up, fall) in peaks.items()})
    claims.append(ctx.claim(
        "math_ppo_peak", "fig4_math.png",
        f"{task}: PPO's task reward peaks (near iteration 50), then declines (Fig. 4a).",
        f"rises, then falls, on the seed means of four numbers of each seed: the iteration of the maximum of PPO's "
        f"task reward smoothed over {w} iterations is no earlier than iteration {w} (a whole smoothing window after "
        f"the start, so a curve that falls from its first iterations cannot pass) and before the last {n} of {length} "
        f"iterations; the maximum lies above the smoothed start (rise > 0); and the final value lies below the peak "
        f"by more than both {cfg.decline:g} x the rise and the fall that the run's batch noise alone reaches (the "
        f"{NOISE_QUANTILE:g} quantile over its residuals around the smoothed curve in shuffled orders: the top "
        f"stretch of a flat noisy curve is no peak): fall - max({cfg.decline:g} x rise, noise) > 0. Each of the four "
        "has its own interval.", t,
        [mean_of("mean peak iteration", top, f"the peak comes no earlier than iteration {w}", ">=", float(w),
                 (0.0, length - 1.0)),
         mean_of("mean peak iteration", top, f"the peak comes before the last {n} iterations", "<", float(length - n),
                 (0.0, length - 1.0)),
         mean_of("mean rise", rise, "the reward rises to its peak", ">", 0.0, (0.0, math.inf)),
         mean_of("mean fall beyond decline and noise", excess, "it then falls beyond the decline and the noise", ">",
                 0.0)]))

    t = Table()
    p = t.add("PPO max drawdown of task reward", ppo, drawdown(ppo, "llm1/task_reward", cfg))
    effects = [difference(f"PPO - CORY-{x} max drawdown", p, t.add(
        f"CORY-{x} max drawdown of task reward", cory, drawdown(cory, _key(x, "task_reward"), cfg)),
        f"CORY-{x}'s task reward draws down less than PPO's") for x in LLMS]
    claims.append(ctx.claim(
        "math_cory_stable", "fig4_math.png", f"{task}: CORY trains more stably than PPO (Fig. 4).",
        f"max drawdown (largest fall below the running maximum) of the task reward smoothed over {w} iterations, "
        "seed means: PPO's - CORY-LLMx's > 0, for LLM1 and LLM2.", t, effects))

    for metric, key, better, sign in (("task reward", "task_reward", "higher", 1), ("KL", "kl", "lower", -1)):
        t = Table()
        p = t.add(f"PPO final {metric}", ppo, final(ppo, f"llm1/{key}", cfg))
        effects = []
        for x in LLMS:
            c = t.add(f"CORY-{x} final {metric} (as pioneer)", cory, final_as_pioneer(cory, x.lower(), key, cfg))
            said = f"CORY-{x}'s final {metric} is {better} than PPO's"
            effects.append(difference(f"CORY-{x} - PPO final {metric}", c, p, said) if sign > 0
                           else difference(f"PPO - CORY-{x} final {metric}", p, c, said))
        claims.append(ctx.claim(
            f"math_cory_{key}", "fig4_math.png", f"{task}: CORY ends with {better} {metric} than PPO (Fig. 4).",
            f"mean final {metric} of CORY-LLM1 and of CORY-LLM2 (each as pioneer) {better} than PPO's.", t, effects))

    t = Table()
    effects = [mean_of(f"mean CORY-{x} combined-reward slope", t.add(
        f"CORY-{x} combined-reward slope", cory, slope(cory, _key(x, "combined_reward"))),
        f"CORY-{x}'s combined reward rises over the second half", ">", 0.0) for x in LLMS]
    claims.append(ctx.claim(
        "math_cory_combined", "fig4_math.png", f"{task}: CORY's combined reward rises steadily (Fig. 4c).",
        f"mean least-squares slope of the {COMBINED} ({eta_text({'CORY': cory})}; {ETA_SOURCE}) over the second "
        "half of training > 0, for CORY-LLM1 and CORY-LLM2.", t, effects))
    return claims


PARETO_TASKS = {"imdb": ("IMDB (the paper's Fig. 2c is GSM8K)", "the sentiment logit"),
                "math": ("Math (GSM8K in the paper)", "the share of correct answers")}
"""Task -> (how the Fig. 2c claim names it, what its task reward is)."""


def pareto_claim(task: str, sweep: Sweep | None, ctx: Context) -> Claim:
    """Fig. 2c on one task: CORY's runs above PPO's frontier over the sweep's KL coefficients, by the report's decision
    rule (cory.report.mechanism) on automatic KL levels, without a dilution control. Without a sweep of the task: not
    tested in this profile."""
    name, _ = PARETO_TASKS[task]
    paper = f"{name}: CORY's (task reward, -KL) frontier dominates PPO's (Fig. 2c)."
    if sweep is None:
        return ctx.absent(SWEEP_TASKS[task], paper, f"no experiment group sweeps the KL coefficient of task {task!r} "
                          "(a group with that task and a sweep_eta)")
    named = {f"{algorithm}_eta{eta:g}": run for algorithm in ("ppo", "cory")
             for eta, run in sorted(sweep.runs[algorithm].items())}
    frontier = {k: v for k, v in named.items() if k.startswith("ppo")}
    cory = {k: v for k, v in named.items() if k.startswith("cory")}
    return frontier_claim(SWEEP_TASKS[task], f"fig2c_{SWEEP_TASKS[task]}.png", paper, frontier, cory, None, None,
                          ctx.cfg.mechanism.margin if ctx.cfg.mechanism else 0.1, ctx,
                          f"group `{sweep.group}`; CORY's pioneer role")


PASSK_NAMES = {"base": "base", "ppo": "PPO", "cory_llm1": "CORY-LLM1", "cory_llm2": "CORY-LLM2"}
"""Model of eval/passk.json -> its name in the claim."""


def passk_claim(results: dict, ctx: Context) -> Claim:
    """Fig. 5: pass@k of the base model, PPO and each CORY agent (eval/passk.json), judged for k up to
    report.passk_max_k (the paper's Fig. 5 spans k = 1-5); larger k are shown, not judged."""
    passk = {m: {(None if s == "none" else int(s)): by_k for s, by_k in results[m]["seeds"].items()}
             for m in PASSK_NAMES}
    ks = sorted(results["ppo"]["mean"], key=int)
    judged = [k for k in ks if int(k) <= ctx.cfg.passk_max_k]
    runs = {"base": "base model", "ppo": "math/ppo", "cory_llm1": "math/cory", "cory_llm2": "math/cory"}
    t = Table()
    labels = {m: {k: t.add(f"pass@{k} {name}", runs[m], {s: float(by_k[k]) for s, by_k in passk[m].items()})
                  for k in ks} for m, name in PASSK_NAMES.items()}
    effects = []
    for m in ("cory_llm1", "cory_llm2"):
        who = PASSK_NAMES[m]
        for k in judged:
            effects.append(difference(f"{who} - PPO pass@{k}", labels[m][k], labels["ppo"][k],
                                      f"{who}'s pass@{k} is above PPO's"))
            effects.append(Effect(f"{who} - base pass@{k}", (labels[m][k], labels["base"][k]),
                                  magnitude=f"{who}'s pass@{k} is above the base model's", op=">", threshold=0.0))
    shown = [k for k in ks if k not in judged]
    return ctx.claim(
        "passk", "fig5_passk.png",
        "CORY beats PPO and the base model at every k of pass@k on the test problems (Fig. 5; paper: pass@1 = 18%).",
        f"for every k in {{{', '.join(judged)}}} (k <= {ctx.cfg.passk_max_k}, report.passk_max_k: the paper's Fig. 5 "
        "spans k = 1-5): mean pass@k of CORY-LLM1 and of CORY-LLM2 above PPO's (direction, paired by training seed) "
        "and above the base model's (trained once: the t interval of CORY's seeds against its value)"
        + (f"; pass@{', pass@'.join(shown)} are shown, not judged." if shown else "."), t, effects)
