"""The paper's claims as testable rules: curve statistics, the verdict rule, and one `Claim` per statement.

Each claim of CORY.md §4 becomes per-seed quantities computed from the runs (`cory.report.Inputs`) and a condition
on them. The condition is applied to every seed whose quantities could all be computed and to the means over those
seeds, and `verdict` turns that into "held", "did not hold", "mixed" or "not measurable"; the report prints the rule
next to the per-seed numbers the verdict was read from, so every verdict can be checked by hand.
Statistics work on one seed's curve (a 1-D array over iterations). "CORY" in a rule means each of LLM1 and LLM2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from cory.report.results import SWEEP_TASKS, Inputs, Run, Sweep

if TYPE_CHECKING:
    from cory.report.config import ReportConfig

HELD, NOT_HELD, MIXED, NOT_MEASURABLE = "held", "did not hold", "mixed", "not measurable"

PerSeed = dict
"""seed -> value; the seed None marks a model trained once (the base model), compared with every seed."""


# --------------------------------------------------------------------------------------------------------------------
# Curve statistics
# --------------------------------------------------------------------------------------------------------------------


def smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Centred rolling mean (over fewer points at the ends)."""
    return pd.Series(y).rolling(window, center=True, min_periods=1).mean().to_numpy()


def final_value(y: np.ndarray, last_n: int) -> float:
    """Mean over the last `last_n` iterations."""
    return float(np.mean(y[-last_n:]))


def late_slope(y: np.ndarray) -> float:
    """Least-squares slope (per iteration) over the second half of the run; NaN with fewer than 2 points."""
    half = y[len(y) // 2 :]
    return float(np.polyfit(np.arange(len(half)), half, 1)[0]) if len(half) >= 2 else math.nan


def max_drawdown(y: np.ndarray, window: int) -> float:
    """Largest fall of the smoothed curve below its running maximum: 0 for a curve that never goes down."""
    s = smooth(y, window)
    return float(np.max(np.maximum.accumulate(s) - s))


def reach_iteration(y: np.ndarray, window: int, last_n: int, fraction: float = 0.9) -> float:
    """First iteration where the smoothed curve has made `fraction` of its gain (final value - iteration 0);
    NaN for a curve without gain."""
    gain = final_value(y, last_n) - y[0]
    if gain <= 0:
        return math.nan
    reached = np.flatnonzero(smooth(y, window) >= y[0] + fraction * gain)
    return float(reached[0]) if len(reached) else math.nan


def peak(y: np.ndarray, window: int, last_n: int) -> tuple[float, float, float]:
    """(iteration of the smoothed curve's maximum, its rise = peak - smoothed start, its fall = peak - final value).

    Start and peak are both read off the smoothed curve, so one noisy first batch cannot fake a rise; a curve whose
    maximum is its start has rise 0 (never negative: the maximum is at least the start)."""
    s = smooth(y, window)
    top = int(np.argmax(s))
    return float(top), float(s[top] - s[0]), float(s[top] - final_value(y, last_n))


NOISE_QUANTILE = 0.95
"""A fall counts as a decline only above this quantile of the falls that the run's batch noise gives a flat curve:
about 1 flat noisy curve in 20 then passes (tests/test_report.py)."""


def noise_fall(y: np.ndarray, window: int, last_n: int, quantile: float = NOISE_QUANTILE, draws: int = 400) -> float:
    """The `quantile` of `peak`'s fall over curves of batch noise alone: the run's residuals around its smoothed
    curve, in shuffled orders (a fixed seed, so the report is reproducible). The smoothed maximum of pure noise sits
    above its final value by chance; a fall no larger than that is no decline. The runs of one seed draw their
    problems in the same order, so easier and harder stretches slower than the window are not in this noise."""
    residual = y - smooth(y, window)
    rng = np.random.default_rng(0)
    return float(np.quantile([peak(rng.permutation(residual), window, last_n)[2] for _ in range(draws)], quantile))


def curve_gap(a: np.ndarray, b: np.ndarray, window: int) -> float:
    """Mean |a - b| of the smoothed curves over the span (max - min) of their smoothed average."""
    n = min(len(a), len(b))
    sa, sb = smooth(a[:n], window), smooth(b[:n], window)
    span = np.ptp((sa + sb) / 2)
    return float(np.mean(np.abs(sa - sb)) / span) if span > 0 else math.nan


def dominated_share(ppo: list[tuple[float, float]], cory: list[tuple[float, float]]) -> float:
    """Share of PPO (reward, KL) points that some CORY point matches or beats on both reward and KL."""
    return float(np.mean([any(r >= pr and k <= pk for r, k in cory) for pr, pk in ppo]))


# --------------------------------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------------------------------


def verdict(on_means: bool | None, per_seed: list[bool | None]) -> str:
    """The verdict from the rule's outcome on the seed means and on each seed (None: not measurable there).

    held: the rule holds on the means AND on every seed; did not hold: on neither the means nor any seed; not
    measurable: on no seed; mixed: anything in between, including a rule measured on some seeds only (the report's
    per-seed table then shows which)."""
    if on_means is None or all(ok is None for ok in per_seed):
        return NOT_MEASURABLE
    if None not in per_seed:
        if on_means and all(per_seed):
            return HELD
        if not on_means and not any(per_seed):
            return NOT_HELD
    return MIXED


@dataclass
class Claim:
    """One statement of the paper with this reproduction's numbers and the rule that decides it."""

    key: str
    figure: str
    """The PNG that shows it."""
    paper: str
    rule: str
    quantities: dict[str, PerSeed]
    """label -> per-seed values; all are shown in the report, the condition reads some of them."""
    condition: Callable[[dict[str, float]], bool]
    """The rule on one set of values (label -> value): applied to each seed and to the seed means."""

    @property
    def seeds(self) -> list[int]:
        """Seeds every seeded quantity has (unseeded ones, e.g. the base model's, join every seed)."""
        seeded = [set(v) - {None} for v in self.quantities.values() if set(v) != {None}]
        return sorted(set.intersection(*seeded)) if seeded else []

    def values(self, seed: int) -> dict[str, float]:
        return {label: v[seed] if seed in v else v[None] for label, v in self.quantities.items()}

    def holds(self) -> dict[int, bool | None]:
        """seed -> whether the rule holds on that seed; None where a quantity is NaN or infinite there (not
        measurable: e.g. a slope over a 1-iteration run, or a ratio to a zero)."""
        return {seed: bool(self.condition(v)) if all(math.isfinite(x) for x in v.values()) else None
                for seed, v in ((s, self.values(s)) for s in self.seeds)}

    @property
    def measured_seeds(self) -> list[int]:
        """The seeds the rule could be applied to: every quantity finite."""
        return [seed for seed, ok in self.holds().items() if ok is not None]

    def means(self) -> dict[str, float]:
        """label -> mean over the measured seeds (NaN without any): the same seeds the per-seed verdicts count."""
        seeds = self.measured_seeds
        return {label: float(np.mean([self.values(s)[label] for s in seeds])) if seeds else math.nan
                for label in self.quantities}

    def holds_on_means(self) -> bool | None:
        """The rule on the means over the measured seeds; None without any measured seed."""
        return bool(self.condition(self.means())) if self.measured_seeds else None

    @property
    def verdict(self) -> str:
        return verdict(self.holds_on_means(), list(self.holds().values()))


# --------------------------------------------------------------------------------------------------------------------
# The claims
# --------------------------------------------------------------------------------------------------------------------


def _pair(a: PerSeed, b: PerSeed, op: Callable) -> PerSeed:
    """op(a[seed], b[seed]) for every seed both have."""
    return {s: op(a[s], b[s]) for s in sorted(a.keys() & b.keys())}


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


LLMS = ("LLM1", "LLM2")


def _key(llm: str, metric: str) -> str:
    return f"{llm.lower()}/{metric}"


def final(run: Run, key: str, cfg: ReportConfig) -> PerSeed:
    return run.per_seed(key, lambda y: final_value(y, cfg.last_n))


def slope(run: Run, key: str) -> PerSeed:
    return run.per_seed(key, late_slope)


def drawdown(run: Run, key: str, cfg: ReportConfig) -> PerSeed:
    return run.per_seed(key, lambda y: max_drawdown(y, cfg.stability_window))


def partner_coef(run: Run) -> float:
    """c of the collective reward r_self + c * r_partner the run was trained with (from its config.json)."""
    return float(run.config.get("cory", {}).get("partner_reward_coef", math.nan))


def combined_eta(run: Run) -> float:
    """eta of the combined reward r - eta * KL the run logged (TrainConfig.eta: train.combined_reward_eta, or
    ppo.init_kl_coef where that is null), from its config.json."""
    eta = run.config.get("combined_reward_eta")
    return float(eta if eta is not None else run.config.get("ppo", {}).get("init_kl_coef", math.nan))


def eta_text(runs: dict[str, Run]) -> str:
    """The combined reward's eta of the runs (label -> run): "η = 0.3", or one per run where they differ."""
    etas = {label: combined_eta(run) for label, run in runs.items()}
    if len(set(etas.values())) == 1:
        return f"η = {next(iter(etas.values())):g}"
    return "η = " + ", ".join(f"{eta:g} ({label})" for label, eta in etas.items())


COMBINED = "combined reward r - η·KL"
ETA_SOURCE = "train.combined_reward_eta, else ppo.init_kl_coef"


def build_claims(inputs: Inputs, cfg: ReportConfig) -> list[Claim]:
    """Every claim of CORY.md §4 that the pipeline reproduces, in the paper's order."""
    imdb = inputs.runs["imdb"]
    return [*imdb_claims(imdb, cfg), *math_claims(inputs.runs["math"], cfg),
            *(pareto_claim(task, inputs.sweeps.get(task), cfg) for task in SWEEP_TASKS),
            passk_claim(inputs.passk), *ablation_claims(imdb, cfg), *cooperation_claims(imdb, cfg)]


def imdb_claims(imdb: dict[str, Run], cfg: ReportConfig) -> list[Claim]:
    """Fig. 3: PPO, the 2x-parameter PPO model and CORY on IMDB."""
    w, tol = cfg.stability_window, cfg.tolerance
    ppo, ppo2x, cory = imdb["ppo"], imdb["ppo_2x"], imdb["cory"]
    claims = []

    gain = "PPO task-reward gain (final - iteration 0)"
    q = {"PPO final task reward": final(ppo, "llm1/task_reward", cfg),
         gain: ppo.per_seed("llm1/task_reward", lambda y: final_value(y, cfg.last_n) - y[0])}
    for x in LLMS:
        q[f"CORY-{x} final task reward"] = final(cory, _key(x, "task_reward"), cfg)
        difference = _pair(q[f"CORY-{x} final task reward"], q["PPO final task reward"], lambda c, p: abs(c - p))
        q[f"|CORY-{x} - PPO| / PPO gain"] = _pair(difference, q[gain], lambda d, g: _ratio(d, abs(g)))
    claims.append(Claim(
        "imdb_similar_reward", "fig3_imdb.png", "PPO and CORY reach similar task reward (Fig. 3a).",
        f"|final task reward of CORY-LLMx - PPO's| <= {tol:g} x PPO's task-reward gain, for LLM1 and LLM2.", q,
        lambda v: all(v[f"|CORY-{x} - PPO| / PPO gain"] <= tol for x in LLMS)))

    q = {"PPO final KL": final(ppo, "llm1/kl", cfg)}
    for x in LLMS:
        q[f"CORY-{x} final KL"] = final(cory, _key(x, "kl"), cfg)
        q[f"KL ratio PPO / CORY-{x}"] = _pair(q["PPO final KL"], q[f"CORY-{x} final KL"], _ratio)
    claims.append(Claim(
        "imdb_kl_ratio", "fig3_imdb.png", "PPO's final KL is more than 2x CORY's (Fig. 3b).",
        f"final KL of PPO / final KL of CORY-LLMx > {cfg.kl_ratio:g}, for LLM1 and LLM2.", q,
        lambda v: all(v[f"KL ratio PPO / CORY-{x}"] > cfg.kl_ratio for x in LLMS)))

    q = {f"{label} curve gap LLM1 vs LLM2": _pair(cory.curves(f"llm1/{metric}"), cory.curves(f"llm2/{metric}"),
                                                 lambda a, b: curve_gap(a, b, w))
         for label, metric in (("task-reward", "task_reward"), ("KL", "kl"))}
    claims.append(Claim(
        "imdb_llms_coincide", "fig3_imdb.png", "The CORY-LLM1 and CORY-LLM2 curves nearly coincide (Fig. 3).",
        f"curve gap <= {tol:g} for task reward and for KL; gap = mean |LLM1 - LLM2| of the curves smoothed over {w} "
        "iterations, divided by the span (max - min) of their smoothed average.", q,
        lambda v: all(x <= tol for x in v.values())))

    q = {"PPO combined-reward slope": slope(ppo, "llm1/combined_reward")}
    q.update({f"CORY-{x} combined-reward slope": slope(cory, _key(x, "combined_reward")) for x in LLMS})
    claims.append(Claim(
        "imdb_combined_reward", "fig3_imdb.png", "CORY's combined reward keeps rising while PPO's falls (Fig. 3c).",
        f"least-squares slope of the {COMBINED} ({eta_text({'PPO': ppo, 'CORY': cory})}; {ETA_SOURCE}) over the "
        "second half of training: > 0 for CORY-LLM1 and CORY-LLM2, < 0 for PPO.", q,
        lambda v: all(v[f"CORY-{x} combined-reward slope"] > 0 for x in LLMS) and v["PPO combined-reward slope"] < 0))

    def reach(run: Run) -> PerSeed:
        return run.per_seed("llm1/task_reward", lambda y: reach_iteration(y, w, cfg.last_n))

    fast, small = "PPO-2x iterations to 90% of its task-reward gain", "PPO iterations to 90% of its task-reward gain"
    q = {fast: reach(ppo2x), small: reach(ppo), "PPO-2x KL slope (second half)": slope(ppo2x, "llm1/kl")}
    claims.append(Claim(
        "imdb_2x_model", "fig3_imdb.png",
        "The 2x-parameter model (GPT2-XL) reaches its maximum task reward fast, but its KL keeps rising (Fig. 3).",
        f"PPO-2x's task reward (smoothed over {w} iterations) makes 90% of its gain no later than PPO's does, and "
        "PPO-2x's KL has a positive slope over the second half of training.", q,
        lambda v: v[fast] <= v[small] and v["PPO-2x KL slope (second half)"] > 0))
    return claims


def math_claims(maths: dict[str, Run], cfg: ReportConfig) -> list[Claim]:
    """Fig. 4: PPO and CORY on the math task (GSM8K in the paper)."""
    w, n = cfg.stability_window, cfg.last_n
    ppo, cory = maths["ppo"], maths["cory"]
    task = "Math (GSM8K in the paper)"
    claims = []

    length = min(len(h) for h in ppo.histories.values())
    top, rise, fall = ("PPO peak iteration (smoothed task reward)", "PPO rise: peak - smoothed start",
                       "PPO fall: peak - final value")
    noise = f"PPO fall batch noise alone reaches ({NOISE_QUANTILE:g} quantile)"
    q = {label: ppo.per_seed("llm1/task_reward", lambda y, i=i: peak(y, w, n)[i])
         for i, label in enumerate((top, rise, fall))}
    q[noise] = ppo.per_seed("llm1/task_reward", lambda y: noise_fall(y, w, n))
    claims.append(Claim(
        "math_ppo_peak", "fig4_math.png",
        f"{task}: PPO's task reward peaks (near iteration 50), then declines (Fig. 4a).",
        f"rises, then falls: the maximum of PPO's task reward smoothed over {w} iterations comes no earlier than "
        f"iteration {w} (a whole smoothing window after the start, so a curve that falls from its first iterations "
        f"cannot pass) and before the last {n} of {length} iterations; it lies above the smoothed start (rise > 0); "
        f"and the final value lies at least {cfg.decline:g} x rise below the peak (fall >= {cfg.decline:g} x rise) "
        f"and by more than the fall that the run's batch noise alone reaches (the {NOISE_QUANTILE:g} quantile over its "
        f"residuals around the smoothed curve in shuffled orders: the top stretch of a flat noisy curve is no peak).",
        q,
        lambda v: w <= v[top] < length - n and v[rise] > 0 and v[fall] >= cfg.decline * v[rise]
        and v[fall] > v[noise]))

    q = {"PPO max drawdown of task reward": drawdown(ppo, "llm1/task_reward", cfg)}
    q.update({f"CORY-{x} max drawdown of task reward": drawdown(cory, _key(x, "task_reward"), cfg) for x in LLMS})
    claims.append(Claim(
        "math_cory_stable", "fig4_math.png", f"{task}: CORY trains more stably than PPO (Fig. 4).",
        f"max drawdown (largest fall below the running maximum) of the task reward smoothed over {w} iterations: "
        "CORY-LLM1's and CORY-LLM2's below PPO's.", q,
        lambda v: all(v[f"CORY-{x} max drawdown of task reward"] < v["PPO max drawdown of task reward"] for x in LLMS)))

    for metric, key, better, sign in (("task reward", "task_reward", "higher", 1), ("KL", "kl", "lower", -1)):
        q = {f"PPO final {metric}": final(ppo, f"llm1/{key}", cfg)}
        q.update({f"CORY-{x} final {metric}": final(cory, _key(x, key), cfg) for x in LLMS})
        claims.append(Claim(
            f"math_cory_{key}", "fig4_math.png", f"{task}: CORY ends with {better} {metric} than PPO (Fig. 4).",
            f"final {metric} of CORY-LLM1 and of CORY-LLM2 {better} than PPO's.", q,
            lambda v, m=metric, s=sign: all(s * (v[f"CORY-{x} final {m}"] - v[f"PPO final {m}"]) > 0 for x in LLMS)))

    q = {f"CORY-{x} combined-reward slope": slope(cory, _key(x, "combined_reward")) for x in LLMS}
    claims.append(Claim(
        "math_cory_combined", "fig4_math.png", f"{task}: CORY's combined reward rises steadily (Fig. 4c).",
        f"least-squares slope of the {COMBINED} ({eta_text({'CORY': cory})}; {ETA_SOURCE}) over the second half of "
        "training > 0 for CORY-LLM1 and CORY-LLM2.", q, lambda v: all(x > 0 for x in v.values())))
    return claims


PARETO_TASKS = {"imdb": ("IMDB (the paper's Fig. 2c is GSM8K)", "the sentiment logit"),
                "math": ("Math (GSM8K in the paper)", "the share of correct answers")}
"""Task -> (how the Fig. 2c claim names it, what its task reward is)."""


def pareto_claim(task: str, sweep: Sweep | None, cfg: ReportConfig) -> Claim:
    """Fig. 2c on one task: the (task reward, -KL) frontiers of PPO and CORY over the KL coefficient eta. Without a
    sweep of the task (no experiment group with its task and a sweep_eta) the claim has no numbers: not measurable."""
    name, reward = PARETO_TASKS[task]
    paper = f"{name}: CORY's (task reward, -KL) frontier dominates PPO's (Fig. 2c)."
    if sweep is None:
        return Claim(SWEEP_TASKS[task], "", paper, f"not measured: these params sweep no KL coefficient on task "
                     f"{task!r} (no experiment group with task: {task} and a sweep_eta).", {}, lambda v: False)

    def frontier(runs: dict[float, Run], x: str) -> dict[int, list[tuple[float, float]]]:
        points = [(final(run, _key(x, "task_reward"), cfg), final(run, _key(x, "kl"), cfg)) for run in runs.values()]
        seeds = set.intersection(*(set(reward) for reward, _ in points))
        return {s: [(reward[s], kl[s]) for reward, kl in points] for s in seeds}

    ppo = frontier(sweep.runs["ppo"], "LLM1")
    q = {f"share of PPO points dominated by CORY-{x}": _pair(ppo, frontier(sweep.runs["cory"], x), dominated_share)
         for x in LLMS}
    etas = ", ".join(f"{e:g}" for e in sorted(sweep.runs["ppo"]))
    return Claim(
        SWEEP_TASKS[task], f"fig2c_{SWEEP_TASKS[task]}.png", paper,
        f"every PPO point (final values, one per eta in {{{etas}}}, group `{sweep.group}`) has a CORY point with "
        f"higher-or-equal final task reward ({reward}) and lower-or-equal final KL; for CORY-LLM1 and for CORY-LLM2.",
        q, lambda v: all(x == 1.0 for x in v.values()))


def passk_claim(results: dict) -> Claim:
    """Fig. 5: pass@k of the base model, PPO and each CORY agent (eval/passk.json)."""
    passk = {m: {(None if s == "none" else int(s)): by_k for s, by_k in results[m]["seeds"].items()}
             for m in ("base", "ppo", "cory_llm1", "cory_llm2")}
    ks = sorted(results["ppo"]["mean"], key=int)
    q = {f"pass@{k} {m}": {s: by_k[k] for s, by_k in runs.items()}
         for k in dict.fromkeys((ks[0], ks[-1])) for m, runs in passk.items()}
    base = {k: max(by_k[k] for by_k in passk["base"].values()) for k in ks}
    margin = "min over k of its pass@k minus the best of PPO and base"
    for m in ("cory_llm1", "cory_llm2"):
        q[f"{m}: {margin}"] = _pair(passk[m], passk["ppo"], lambda c, p: min(c[k] - max(p[k], base[k]) for k in ks))
    return Claim(
        "passk", "fig5_passk.png",
        "CORY beats PPO and the base model at every k of pass@k on the test problems (Fig. 5; paper: pass@1 = 18%).",
        f"for every k in {{{', '.join(ks)}}}: pass@k of CORY-LLM1 and of CORY-LLM2 > pass@k of PPO (same seed) and "
        "of the base model.", q,
        lambda v: all(v[f"{m}: {margin}"] > 0 for m in ("cory_llm1", "cory_llm2")))


def ablation_claims(imdb: dict[str, Run], cfg: ReportConfig) -> list[Claim]:
    """Fig. 6: CORY without knowledge transfer (KT) and without role exchange (REx), IMDB."""
    cory, no_kt, no_rex = imdb["cory"], imdb["cory_no_kt"], imdb["cory_no_rex"]
    both = (("CORY", cory), ("w/o KT", no_kt))
    claims = []

    q = {f"{name} {x} final KL": final(run, _key(x, "kl"), cfg) for x in LLMS for name, run in both}
    claims.append(Claim(
        "no_kt_kl", "fig6_ablations.png", "Without knowledge transfer (KT), KL is higher than CORY's (Fig. 6).",
        "final KL of CORY w/o KT above CORY's, for LLM1 and for LLM2.", q,
        lambda v: all(v[f"w/o KT {x} final KL"] > v[f"CORY {x} final KL"] for x in LLMS)))

    q = {f"{name} {x} max drawdown of task reward": drawdown(run, _key(x, "task_reward"), cfg)
         for x in LLMS for name, run in both}
    claims.append(Claim(
        "no_kt_unstable", "fig6_ablations.png", "Without knowledge transfer, the task reward is unstable (Fig. 6).",
        f"max drawdown of the task reward smoothed over {cfg.stability_window} iterations: CORY w/o KT's above "
        "CORY's, for LLM1 and LLM2.", q,
        lambda v: all(v[f"w/o KT {x} max drawdown of task reward"] > v[f"CORY {x} max drawdown of task reward"]
                      for x in LLMS)))

    # Without role exchange LLM1 is always the pioneer: the role columns are the two models.
    pioneer, observer = "w/o REx pioneer final KL", "w/o REx observer final KL"
    reference = "CORY final KL (mean of LLM1 and LLM2)"
    rex = {pioneer: final(no_rex, "pioneer/kl", cfg), observer: final(no_rex, "observer/kl", cfg)}
    q = {reference: _pair(final(cory, "llm1/kl", cfg), final(cory, "llm2/kl", cfg), lambda a, b: (a + b) / 2), **rex}
    claims.append(Claim(
        "no_rex_kl", "fig6_ablations.png",
        "Without role exchange (REx), both models end with much higher KL than CORY (Fig. 6).",
        "final KL of the w/o-REx pioneer and of the w/o-REx observer each above CORY's (mean of LLM1 and LLM2).", q,
        lambda v: min(v[pioneer], v[observer]) > v[reference]))
    claims.append(Claim(
        "no_rex_observer", "fig6_ablations.png",
        "Without role exchange, the observer's KL is well below the pioneer's (Fig. 6).",
        "final KL of the w/o-REx observer below the w/o-REx pioneer's.", rex,
        lambda v: v[observer] < v[pioneer]))
    return claims


def cooperation_claims(imdb: dict[str, Run], cfg: ReportConfig) -> list[Claim]:
    """Cooperative vs competitive partner reward (camera-ready appendix), IMDB, LLM1."""
    cory, comp = imdb["cory"], imdb["cory_competitive"]
    coefs = f"c = {partner_coef(cory):g} vs c = {partner_coef(comp):g}"
    claims = []
    for metric, key, better, sign in (("task reward", "task_reward", "higher", 1), ("KL", "kl", "lower", -1)):
        coop, competitive = f"cooperative LLM1 final {metric}", f"competitive LLM1 final {metric}"
        q = {coop: final(cory, f"llm1/{key}", cfg), competitive: final(comp, f"llm1/{key}", cfg)}
        claims.append(Claim(
            f"coop_{key}", "fig_coop_vs_comp.png",
            f"A cooperative partner reward gives LLM1 {better} {metric} than a competitive one "
            "(camera-ready appendix).",
            f"final {metric} of LLM1 {better} with the cooperative than with the competitive partner reward ({coefs}).",
            q, lambda v, a=coop, b=competitive, s=sign: s * (v[a] - v[b]) > 0))
    return claims
