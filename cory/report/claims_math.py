"""The paper's math claims (Fig. 4 on the training curves, Fig. 5's pass@k) and the Pareto frontier of Fig. 2c on
either task."""

from __future__ import annotations

import math

import numpy as np

from cory.report.curves import NOISE_QUANTILE, dominated_share, noise_fall, peak
from cory.report.quantities import (
    COMBINED, Context, ETA_SOURCE, LLMS, Table, _key, difference, drawdown, eta_text, final, mean_of, slope,
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
        [mean_of("mean peak iteration, no earlier than", top, ">=", float(w), (0.0, length - 1.0)),
         mean_of("mean peak iteration, before the last iterations", top, "<", float(length - n), (0.0, length - 1.0)),
         mean_of("mean rise", rise, ">", 0.0, (0.0, math.inf)), mean_of("mean fall beyond decline and noise", excess, ">", 0.0)]))

    t = Table()
    p = t.add("PPO max drawdown of task reward", ppo, drawdown(ppo, "llm1/task_reward", cfg))
    effects = [difference(f"PPO - CORY-{x} max drawdown", p, t.add(
        f"CORY-{x} max drawdown of task reward", cory, drawdown(cory, _key(x, "task_reward"), cfg))) for x in LLMS]
    claims.append(ctx.claim(
        "math_cory_stable", "fig4_math.png", f"{task}: CORY trains more stably than PPO (Fig. 4).",
        f"max drawdown (largest fall below the running maximum) of the task reward smoothed over {w} iterations, "
        "seed means: PPO's - CORY-LLMx's > 0, for LLM1 and LLM2.", t, effects))

    for metric, key, better, sign in (("task reward", "task_reward", "higher", 1), ("KL", "kl", "lower", -1)):
        t = Table()
        p = t.add(f"PPO final {metric}", ppo, final(ppo, f"llm1/{key}", cfg))
        effects = []
        for x in LLMS:
            c = t.add(f"CORY-{x} final {metric}", cory, final(cory, _key(x, key), cfg))
            effects.append(difference(f"CORY-{x} - PPO final {metric}", c, p) if sign > 0
                           else difference(f"PPO - CORY-{x} final {metric}", p, c))
        claims.append(ctx.claim(
            f"math_cory_{key}", "fig4_math.png", f"{task}: CORY ends with {better} {metric} than PPO (Fig. 4).",
            f"mean final {metric} of CORY-LLM1 and of CORY-LLM2 {better} than PPO's (the difference's interval "
            "clears 0).", t, effects))

    t = Table()
    effects = [mean_of(f"mean CORY-{x} combined-reward slope", t.add(
        f"CORY-{x} combined-reward slope", cory, slope(cory, _key(x, "combined_reward"))), ">", 0.0) for x in LLMS]
    claims.append(ctx.claim(
        "math_cory_combined", "fig4_math.png", f"{task}: CORY's combined reward rises steadily (Fig. 4c).",
        f"mean least-squares slope of the {COMBINED} ({eta_text({'CORY': cory})}; {ETA_SOURCE}) over the second "
        "half of training > 0, for CORY-LLM1 and CORY-LLM2.", t, effects))
    return claims


PARETO_TASKS = {"imdb": ("IMDB (the paper's Fig. 2c is GSM8K)", "the sentiment logit"),
                "math": ("Math (GSM8K in the paper)", "the share of correct answers")}
"""Task -> (how the Fig. 2c claim names it, what its task reward is)."""


def pareto_claim(task: str, sweep: Sweep | None, ctx: Context) -> Claim:
    """Fig. 2c on one task: the (task reward, -KL) frontiers of PPO and CORY over the KL coefficient eta, each
    point the seed means of one run. Without a sweep of the task (no experiment group with its task and a
    sweep_eta) the claim has no numbers: not measurable."""
    name, reward = PARETO_TASKS[task]
    paper = f"{name}: CORY's (task reward, -KL) frontier dominates PPO's (Fig. 2c)."
    if sweep is None:
        return ctx.claim(SWEEP_TASKS[task], "", paper, f"not measured: these params sweep no KL coefficient on task "
                         f"{task!r} (no experiment group with task: {task} and a sweep_eta).", Table(), [])
    cfg = ctx.cfg
    t = Table()

    def points(algorithm: str, x: str) -> list[tuple[str, str]]:
        out = []
        for eta, run in sorted(sweep.runs[algorithm].items()):
            who = "PPO" if algorithm == "ppo" else f"CORY-{x}"
            out.append((t.add(f"{who} η={eta:g} final task reward", run, final(run, _key(x, "task_reward"), cfg)),
                        t.add(f"{who} η={eta:g} final KL", run, final(run, _key(x, "kl"), cfg))))
        return out

    ppo = points("ppo", "LLM1")
    effects = []
    for x in LLMS:
        cory = points("cory", x)
        reads = tuple(label for pair in ppo + cory for label in pair)

        def share(*v, m=len(ppo)):
            pairs = list(zip(v[0::2], v[1::2]))
            return dominated_share(pairs[:m], pairs[m:])

        effects.append(Effect(f"share of PPO points dominated by CORY-{x}", reads, share, ">=", 1.0, (0.0, 1.0)))
    etas = ", ".join(f"{e:g}" for e in sorted(sweep.runs["ppo"]))
    return ctx.claim(
        SWEEP_TASKS[task], f"fig2c_{SWEEP_TASKS[task]}.png", paper,
        f"every PPO point (the seed means of final task reward ({reward}) and final KL, one point per eta in "
        f"{{{etas}}}, group `{sweep.group}`) has a CORY point with higher-or-equal task reward and lower-or-equal KL: "
        "share of PPO points so dominated >= 1, for CORY-LLM1 and for CORY-LLM2 (every run's seeds resampled on "
        "their own).", t, effects)


PASSK_NAMES = {"base": "base", "ppo": "PPO", "cory_llm1": "CORY-LLM1", "cory_llm2": "CORY-LLM2"}
"""Model of eval/passk.json -> its name in the claim."""


def passk_claim(results: dict, ctx: Context) -> Claim:
    """Fig. 5: pass@k of the base model, PPO and each CORY agent (eval/passk.json)."""
    passk = {m: {(None if s == "none" else int(s)): by_k for s, by_k in results[m]["seeds"].items()}
             for m in PASSK_NAMES}
    ks = sorted(results["ppo"]["mean"], key=int)
    runs = {"base": "base model", "ppo": "math/ppo", "cory_llm1": "math/cory", "cory_llm2": "math/cory"}
    t = Table()
    labels = {m: [t.add(f"pass@{k} {name}", runs[m], {s: float(by_k[k]) for s, by_k in passk[m].items()})
                  for k in ks] for m, name in PASSK_NAMES.items()}
    n = len(ks)

    def margin(*v):  # CORY's pass@k, PPO's, the base model's, k by k: the smallest lead over the better of the two
        return np.min([np.subtract(v[i], np.maximum(v[n + i], v[2 * n + i])) for i in range(n)], axis=0)

    effects = [Effect(f"{PASSK_NAMES[m]}: min over k of pass@k - max(PPO's, base's)",
                      (*labels[m], *labels["ppo"], *labels["base"]), margin, ">", 0.0)
               for m in ("cory_llm1", "cory_llm2")]
    return ctx.claim(
        "passk", "fig5_passk.png",
        "CORY beats PPO and the base model at every k of pass@k on the test problems (Fig. 5; paper: pass@1 = 18%).",
        f"for every k in {{{', '.join(ks)}}}: mean pass@k of CORY-LLM1 and of CORY-LLM2 > mean pass@k of PPO and "
        "pass@k of the base model (trained once); the interval is on the smallest such lead over k.", t, effects)
