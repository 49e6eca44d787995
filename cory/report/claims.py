"""The paper's claims as testable rules: curve statistics, each claim's effects, and the verdict they give.

Each claim of CORY.md §4 becomes per-seed quantities computed from the runs (`cory.results.Inputs`) and one effect
per sub-condition (one for LLM1 and one for LLM2, say): a number computed from the seed means of some quantities,
with its interval over seeds (cory.report.stats: a percentile bootstrap, each run's seeds resampled on their own),
and the side of a threshold the claim puts it on. A sub-condition held where its whole interval lies on that side,
did not hold where the whole interval lies on the other, and is inconclusive where the interval contains the
threshold (or, with one seed, does not exist). A claim held if every sub-condition held, did not hold if any did not,
and is inconclusive otherwise; "not measurable" is a claim without numbers. The report prints each effect with its
interval and the per-seed numbers it was computed from, so every verdict can be checked by hand.

Statistics work on one seed's curve (a 1-D array over iterations). "CORY" in a rule means each of LLM1 and LLM2.
The paper's own numbers (its text's, and those read off its figures) are in PAPER_VALUES, shown beside ours and
never used by a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from cory.report.stats import (
    HELD,
    INCONCLUSIVE,
    NOT_HELD,
    NOT_MEASURABLE,
    NOT_TESTED,
    SIDES,
    Bootstrap,
    Interval,
    bootstrap_interval,
    clopper_pearson,
    combine,
    rate_difference,
    seeds_needed,
    seeds_needed_for_rates,
    side,
)
from cory.report.results import SWEEP_TASKS, Inputs, Run, Sweep

if TYPE_CHECKING:
    from cory.report.config import ReportConfig

__all__ = ["HELD", "INCONCLUSIVE", "NOT_HELD", "NOT_MEASURABLE", "NOT_TESTED", "Claim", "Effect", "RateDifference",
           "build_claims"]

PerSeed = dict
"""seed -> value; the seed None marks a model trained once (the base model), the same for every seed."""


# --------------------------------------------------------------------------------------------------------------------
# Curve statistics
# --------------------------------------------------------------------------------------------------------------------


def smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Centred rolling mean (over fewer points at the ends)."""
    return pd.Series(y).rolling(window, center=True, min_periods=1).mean().to_numpy()


def final_value(y: np.ndarray, last_n: int) -> float:
    """Mean over the last `last_n` iterations."""
    return float(np.mean(y[-last_n:]))


def start_value(y: np.ndarray, first_n: int) -> float:
    """Mean over the first `first_n` iterations (the paper's curves, a moving window of ~10, start near 9)."""
    return float(np.mean(y[:first_n]))


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


def dominated_share(ppo: list[tuple], cory: list[tuple]):
    """Share of PPO (reward, KL) points that some CORY point matches or beats on both reward and KL. Elementwise:
    each coordinate may be one number or one per bootstrap draw."""
    beaten = [np.any([(np.asarray(r) >= pr) & (np.asarray(k) <= pk) for r, k in cory], axis=0) for pr, pk in ppo]
    return np.mean(beaten, axis=0)


# --------------------------------------------------------------------------------------------------------------------
# Effects and claims
# --------------------------------------------------------------------------------------------------------------------


def ratio(a, b):
    """a / b, elementwise: inf or NaN (no error) where b is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, b)


def fall_factor(ppo_fall, cory_fall):
    """How many times CORY's fall PPO's fall is: PPO's / CORY's where CORY's combined reward fell (> 0); infinite
    where CORY's did not fall and PPO's did; 0 where neither fell (PPO's fall is then no larger than CORY's)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.asarray(cory_fall) > 0, np.divide(ppo_fall, cory_fall),
                        np.where(np.asarray(ppo_fall) > 0, np.inf, 0.0))


@dataclass(frozen=True)
class EffectResult:
    """One sub-condition of a claim, evaluated: the effect at the seed means, its interval, and its verdict."""

    label: str
    interval: Interval
    op: str
    threshold: float
    verdict: str
    seeds: dict[str, int]
    """run -> the seeds it contributed (those where every quantity the effect reads of it is finite)."""
    seeds_needed: float
    """Seeds per run for the interval to clear the threshold at the measured spread (stats.seeds_needed)."""
    method: str
    """How the interval was drawn, for the report: "bootstrap" or "exact"."""


@dataclass
class Effect:
    """A sub-condition: `formula` of the seed means of the quantities `reads`, which must lie on the `op` side of
    `threshold` (e.g. PPO's mean final KL / CORY-LLM1's > 2). `formula` is elementwise (numpy): the bootstrap calls
    it once with every draw's means at once."""

    label: str
    reads: tuple[str, ...]
    formula: Callable[..., object]
    op: str
    threshold: float
    method = "bootstrap"

    def samples(self, claim: Claim) -> tuple[dict[str, np.ndarray], list[int], list[float]]:
        """(run -> its (seeds, quantities) array, the `reads` index of each column in run order then constants, the
        constants): a run's seeds are those where every quantity it gives the effect is finite."""
        units: dict[str, list[int]] = {}
        constants: list[int] = []
        for i, label in enumerate(self.reads):
            if set(claim.quantities[label]) == {None}:
                constants.append(i)
            else:
                units.setdefault(claim.runs[label], []).append(i)
        arrays, order = {}, []
        for unit, columns in units.items():
            values = [claim.quantities[self.reads[i]] for i in columns]
            seeds = sorted(set.intersection(*(set(v) for v in values)))
            seeds = [s for s in seeds if all(math.isfinite(v[s]) for v in values)]
            arrays[unit] = np.array([[v[s] for v in values] for s in seeds], dtype=float).reshape(len(seeds),
                                                                                                  len(values))
            order += columns
        return arrays, order + constants, [float(claim.quantities[self.reads[i]][None]) for i in constants]

    def interval(self, claim: Claim) -> tuple[Interval, dict[str, int]]:
        arrays, order, constants = self.samples(claim)

        def in_reads_order(*args):
            by_read = [None] * len(order)
            for position, i in enumerate(order):
                by_read[i] = args[position]
            return self.formula(*by_read)

        if any(v.shape[0] == 0 for v in arrays.values()) or not all(map(math.isfinite, constants)):
            return Interval(math.nan, math.nan, math.nan), {u: v.shape[0] for u, v in arrays.items()}
        return (bootstrap_interval(list(arrays.values()), in_reads_order, claim.bootstrap, tuple(constants)),
                {u: v.shape[0] for u, v in arrays.items()})

    def needed(self, claim: Claim, interval: Interval, seeds: dict[str, int]) -> float:
        return seeds_needed(interval, self.threshold, min(seeds.values(), default=0), claim.bootstrap.confidence)

    def evaluate(self, claim: Claim) -> EffectResult:
        interval, seeds = self.interval(claim)
        return EffectResult(self.label, interval, self.op, self.threshold, side(interval, self.op, self.threshold),
                            seeds, self.needed(claim, interval, seeds), self.method)


@dataclass
class RateDifference(Effect):
    """rate(a) - rate(b) of two 0/1 quantities of independent runs (e.g. PPO's and CORY's collapse, one per seed),
    with the exact interval of stats.rate_difference; `formula` is unused."""

    method = "exact"

    def counts(self, claim: Claim) -> list[tuple[int, int]]:
        """(k, n) of each of the two quantities over its finite seeds."""
        values = [[v for v in claim.quantities[label].values() if math.isfinite(v)] for label in self.reads]
        return [(int(sum(v)), len(v)) for v in values]

    def interval(self, claim: Claim) -> tuple[Interval, dict[str, int]]:
        (k1, n1), (k2, n2) = self.counts(claim)
        seeds = {claim.runs[self.reads[0]]: n1, claim.runs[self.reads[1]]: n2}
        return rate_difference(k1, n1, k2, n2, claim.bootstrap.confidence), seeds

    def needed(self, claim: Claim, interval: Interval, seeds: dict[str, int]) -> float:
        (k1, n1), (k2, n2) = self.counts(claim)
        return seeds_needed_for_rates(k1, n1, k2, n2, claim.bootstrap.confidence)


@dataclass(frozen=True)
class PaperValue:
    """A number of the paper (a value, or a (low, high) range), with where it comes from; never ours."""

    value: float | tuple[float, float]
    source: str


@dataclass
class Claim:
    """One statement of the paper with this reproduction's numbers and the effects that decide it."""

    key: str
    figure: str
    """The PNG that shows it ("" for none)."""
    paper: str
    rule: str
    quantities: dict[str, PerSeed]
    """label -> per-seed values; all are shown in the report, the effects read some of them."""
    runs: dict[str, str] = field(default_factory=dict)
    """label -> the run it comes from: the unit the bootstrap resamples (quantities of one run, seed by seed)."""
    effects: list[Effect] = field(default_factory=list)
    paper_values: dict[str, PaperValue] = field(default_factory=dict)
    """label -> the paper's number; a label equal to a quantity's or an effect's is shown beside it."""
    notes: list[str] = field(default_factory=list)
    """Lines printed under the verdict (e.g. the collapse rates and the calibration target)."""
    bootstrap: Bootstrap = Bootstrap()
    tested: bool = True
    """False where params report.test_claims is false: the numbers are shown, the verdict is "not tested"."""

    @property
    def seeds(self) -> list[int]:
        """Every seed some seeded quantity has (unseeded ones, e.g. the base model's, join every seed)."""
        return sorted(set().union(*(set(v) - {None} for v in self.quantities.values())))

    @cached_property
    def results(self) -> list[EffectResult]:
        return [effect.evaluate(self) for effect in self.effects]

    @property
    def measured_verdict(self) -> str:
        """The verdict the effects give, whether or not the profile tests claims."""
        return combine([r.verdict for r in self.results])

    @property
    def verdict(self) -> str:
        return self.measured_verdict if self.tested else NOT_TESTED

    @property
    def seeds_used(self) -> dict[str, int]:
        """run -> the fewest seeds any effect could use of it."""
        used: dict[str, int] = {}
        for r in self.results:
            for run, n in r.seeds.items():
                used[run] = min(n, used.get(run, n))
        return used

    @property
    def seeds_needed(self) -> float:
        """Seeds per run for a decided verdict at the measured spread: where every estimate lies on the claim's side,
        the most any sub-condition needs (all must clear); else the fewest that one on the other side needs (one
        that did not hold decides the claim). NaN where a needed count is unknown (under 2 seeds)."""
        against = [r.seeds_needed for r in self.results if not SIDES[r.op](r.interval.estimate, r.threshold)]
        counts = against or [r.seeds_needed for r in self.results]
        if not counts or any(math.isnan(c) for c in counts):
            return math.nan
        return min(counts) if against else max(counts)

    def means(self) -> dict[str, float]:
        """label -> mean over the seeds where it is finite (NaN without any)."""
        finite = {label: [x for x in v.values() if math.isfinite(x)] for label, v in self.quantities.items()}
        return {label: float(np.mean(x)) if x else math.nan for label, x in finite.items()}


# --------------------------------------------------------------------------------------------------------------------
# The paper's numbers (its text's and its figures'): beside ours in the report, never part of a verdict
# --------------------------------------------------------------------------------------------------------------------

READ = "read off the authors' figure"
FIG3C_END = {
    "PPO start combined reward": PaperValue((0.4, 0.5), f"Fig. 3c, every run at the start, {READ}"),
    "PPO final combined reward": PaperValue(-8.7, f"Fig. 3c, PPO-GPT-2-l at iteration ~100, {READ}"),
    "PPO-2x final combined reward": PaperValue(-9.5, f"Fig. 3c, PPO-GPT-2-xl at iteration ~100, {READ}"),
    "CORY-LLM1 final combined reward": PaperValue(-1.1, f"Fig. 3c, at iteration ~100, {READ}"),
    "CORY-LLM2 final combined reward": PaperValue(-1.3, f"Fig. 3c, at iteration ~100, {READ}"),
}
DERIVED = "derived from the Fig. 3c readings (start +0.45, the middle of +0.4..+0.5)"
INFERRED_KL = ("an order-of-magnitude inference from Fig. 3c's combined reward (task reward ~2.5, η ≈ 0.3-0.4), "
               "not a number the paper states")
PASSK_READ = "Fig. 5, GSM8K test, 4-bit Llama-2-7b-chat, read off the authors' figure"
PAPER_PASSK = {"base": (0.123, 0.206, 0.265, 0.300, 0.331), "PPO": (0.145, 0.222, 0.279, 0.317, 0.344),
               "CORY": (0.179, 0.260, 0.315, 0.358, 0.387)}
ABLATION_READ = f"Fig. 6c, combined reward at iteration ~101, {READ}"

PAPER_VALUES: dict[str, dict[str, PaperValue]] = {
    "imdb_similar_reward": {
        f"{who} final task reward": PaperValue(2.5, f"Fig. 3a, about 2.5 for every method, {READ}")
        for who in ("PPO", "CORY-LLM1", "CORY-LLM2")},
    "imdb_kl_ratio": {
        **{f"mean final KL of PPO / CORY-{x}": PaperValue(2.0, "§4, Fig. 3b: 'more than 2x' (a lower bound)")
           for x in ("LLM1", "LLM2")},
        "PPO final KL": PaperValue((28.0, 37.0), f"PPO-GPT-2-l at iteration 100: {INFERRED_KL}"),
        **{f"CORY-{x} final KL": PaperValue((9.0, 12.0), f"at iteration 100: {INFERRED_KL}") for x in ("LLM1", "LLM2")},
    },
    "imdb_combined_reward": {k: v for k, v in FIG3C_END.items() if "final" in k},
    "imdb_combined_fall": {
        **FIG3C_END,
        **{f"{who} start combined reward": PaperValue((0.4, 0.5), f"Fig. 3c, every run at the start, {READ}")
           for who in ("PPO-2x", "CORY-LLM1", "CORY-LLM2")},
        "PPO fall (start - final)": PaperValue(9.15, DERIVED),
        "PPO-2x fall (start - final)": PaperValue(9.95, DERIVED),
        "CORY-LLM1 fall (start - final)": PaperValue(1.55, DERIVED),
        "CORY-LLM2 fall (start - final)": PaperValue(1.75, DERIVED),
        "PPO's fall / CORY-LLM1's fall": PaperValue(5.9, f"{DERIVED}; about 7x as the end values' ratio"),
        "PPO's fall / CORY-LLM2's fall": PaperValue(5.2, f"{DERIVED}; about 7x as the end values' ratio"),
    },
    "imdb_collapse": {
        "PPO final KL": PaperValue((28.0, 37.0), f"PPO-GPT-2-l at iteration 100: {INFERRED_KL}"),
        **{f"CORY-{x} final KL": PaperValue((9.0, 12.0), f"at iteration 100: {INFERRED_KL}") for x in ("LLM1", "LLM2")},
    },
    "imdb_2x_model": {"PPO-2x final combined reward": FIG3C_END["PPO-2x final combined reward"]},
    "math_ppo_peak": {"PPO peak iteration (smoothed task reward)": PaperValue(
        50.0, "§4, Fig. 4a: 'peaks near iteration 50' (GSM8K, the paper's own run length)")},
    "passk": {
        **{f"pass@{k} {who}": PaperValue(v, PASSK_READ) for who in ("base", "PPO") for k, v in
           zip(range(1, 6), PAPER_PASSK[who])},
        **{f"pass@{k} CORY-{x}": PaperValue(v, f"{PASSK_READ}; one CORY curve") for x in ("LLM1", "LLM2")
           for k, v in zip(range(1, 6), PAPER_PASSK["CORY"])},
        "pass@1 CORY (text)": PaperValue(0.18, "§4 text, the only number it states"),
    },
    "no_kt_kl": {
        "w/o KT LLM1 final combined reward": PaperValue(-5.2, ABLATION_READ),
        "w/o KT LLM2 final combined reward": PaperValue(-4.4, ABLATION_READ),
        "CORY LLM1 final combined reward": PaperValue(-1.1, ABLATION_READ),
        "CORY LLM2 final combined reward": PaperValue(-1.3, ABLATION_READ),
    },
    "no_rex_kl": {
        "w/o REx pioneer (LLM1) final combined reward": PaperValue(-10.2, f"{ABLATION_READ} (LLM1)"),
        "w/o REx observer (LLM2) final combined reward": PaperValue(-6.3, f"{ABLATION_READ} (LLM2)"),
        "CORY LLM1 final combined reward": PaperValue(-1.1, ABLATION_READ),
        "CORY LLM2 final combined reward": PaperValue(-1.3, ABLATION_READ),
    },
}
PAPER_VALUES["no_kt_unstable"] = PAPER_VALUES["no_kt_kl"]
PAPER_VALUES["no_rex_observer"] = {k: v for k, v in PAPER_VALUES["no_rex_kl"].items() if "w/o REx" in k}
"""Claim key (without its group) -> the paper's numbers, by the label of our quantity or effect they go beside."""


# --------------------------------------------------------------------------------------------------------------------
# Building the claims
# --------------------------------------------------------------------------------------------------------------------

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
MEANS = "seed means"

GROUP_MODELS = {"imdb": "imdb_small (30M, from scratch)", "imdb_smollm2": "SmolLM2-135M"}
"""IMDB experiment group -> how claim titles name its model (other groups: by the group's name)."""


@dataclass
class Table:
    """A claim's quantities under construction, each with the run it comes from."""

    quantities: dict[str, PerSeed] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)

    def add(self, label: str, run: Run | str, values: PerSeed) -> str:
        self.quantities[label] = values
        self.runs[label] = run if isinstance(run, str) else run.name
        return label


@dataclass(frozen=True)
class Context:
    """What every claim of one build shares: the settings, and for an IMDB group its key and title prefixes."""

    cfg: ReportConfig
    key_prefix: str = ""
    title_prefix: str = ""

    def claim(self, key: str, figure: str, paper: str, rule: str, table: Table, effects: list[Effect],
              notes: list[str] | None = None) -> Claim:
        cfg = self.cfg
        return Claim(f"{self.key_prefix}{key}", figure, f"{self.title_prefix}{paper}", rule, table.quantities,
                     table.runs, effects, PAPER_VALUES.get(key, {}), notes or [],
                     Bootstrap(cfg.confidence, cfg.bootstrap_draws, cfg.bootstrap_seed), cfg.test_claims)


def difference(label: str, a: str, b: str, op: str = ">", threshold: float = 0.0) -> Effect:
    """The effect mean(a) - mean(b), `op` threshold (0 unless said)."""
    return Effect(label, (a, b), lambda x, y: np.subtract(x, y), op, threshold)


def mean_of(label: str, a: str, op: str, threshold: float) -> Effect:
    """The effect mean(a), `op` threshold."""
    return Effect(label, (a,), lambda x: x, op, threshold)


def build_claims(inputs: Inputs, cfg: ReportConfig) -> list[Claim]:
    """Every claim of CORY.md §4 that the pipeline reproduces, in the paper's order; the IMDB ones for each group of
    report.imdb_groups."""
    groups = {group: group_context(group, cfg) for group in cfg.imdb_groups}
    return [*(c for g, ctx in groups.items() for c in imdb_claims(inputs.runs[g], ctx)),
            *math_claims(inputs.runs["math"], Context(cfg)),
            *(pareto_claim(task, inputs.sweeps.get(task), Context(cfg)) for task in SWEEP_TASKS),
            passk_claim(inputs.passk, Context(cfg)),
            *(c for g, ctx in groups.items() for c in ablation_claims(inputs.runs[g], ctx)),
            *(c for g, ctx in groups.items() for c in cooperation_claims(inputs.runs[g], ctx))]


def group_context(group: str, cfg: ReportConfig) -> Context:
    """Keys <group>/<claim> for a group other than `imdb`; titles prefixed with its model where there are several
    IMDB groups or it is not `imdb` (the default profile's titles stay as they were)."""
    named = group != "imdb" or len(cfg.imdb_groups) > 1
    return Context(cfg, "" if group == "imdb" else f"{group}/",
                   f"{GROUP_MODELS.get(group, group)}: " if named else "")


def figure_of(ctx: Context, name: str) -> str:
    """The figure of a claim: the report draws every figure for the `imdb` group, and Fig. 3 for each other IMDB
    group (fig3_<group>.png); the other figures' claims of those groups have none."""
    if not ctx.key_prefix:
        return name
    return f"fig3_{ctx.key_prefix.rstrip('/')}.png" if name == "fig3_imdb.png" else ""


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
                      ratio, ">", cfg.kl_ratio) for x in LLMS]
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
        [mean_of("mean peak iteration, no earlier than", top, ">=", float(w)),
         mean_of("mean peak iteration, before the last iterations", top, "<", float(length - n)),
         mean_of("mean rise", rise, ">", 0.0), mean_of("mean fall beyond decline and noise", excess, ">", 0.0)]))

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

        effects.append(Effect(f"share of PPO points dominated by CORY-{x}", reads, share, ">=", 1.0))
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
