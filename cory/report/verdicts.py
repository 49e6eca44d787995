"""A claim's statements and their verdicts. An effect is a number computed from the seed means of some quantities (a
difference, a ratio, a rate); it carries up to two statements, tested apart: its direction ("CORY's KL is lower than
PPO's", an exact rank test) and its magnitude ("more than 2x lower", the interval against the paper's threshold). A
Claim gathers its effects, quantities and the paper's numbers, and combines its statements' verdicts into its own
(cory.report.stats.combine)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from cory.report.rates import (clopper_pearson, rate_difference, rate_difference_seeds_for_power,
                               rate_seeds_for_power, smallest_rate_p)
from cory.report.stats import (
    NOT_MEASURABLE, NOT_TESTED, SIDES, Estimate, Interval, Settings, combine, contrast, fewest_for_rank, log_ratio,
    rank_test, rank_verdict, seeds_for_power, side, t_interval, within,
)

PerSeed = dict
"""seed -> value; the seed None marks a model trained once (the base model), the same for every seed."""

GREATER = (">", ">=")


@dataclass(frozen=True)
class Test:
    """One statement of a claim, judged: what it says, the number it was read from with its interval, how, and the
    verdict."""

    statement: str
    kind: str
    """"direction" (a rank test), "magnitude" (the interval against a threshold), "similar" (two one-sided tests) or
    "rate" (an exact interval of seeds' rates)."""
    label: str
    """The number it reads (e.g. "PPO / CORY-LLM1 final KL")."""
    interval: Interval
    op: str
    threshold: float
    verdict: str
    method: str
    seeds: dict[str, int]
    """run -> the seeds it contributed (those where every quantity the effect reads of it is finite)."""
    seeds_needed: float
    """Seeds per run for a decided verdict with 80% power, were the effect as measured (NaN: unknown)."""
    on_side: bool
    """Whether the estimate lies on the statement's side (where more seeds would make it hold)."""
    p: float = math.nan
    """A rank test's one-sided p for the statement's direction (NaN for other kinds)."""
    p_other: float = math.nan
    """Its one-sided p for the other direction."""
    smallest_p: float = math.nan
    """The smallest p the test can reach at these seed counts."""


@dataclass
class Sample:
    """An effect's data: each read's per-seed values (aligned where paired), the constants, and how they pair."""

    values: list[np.ndarray | float]
    """One entry per read, in `reads` order: an array over seeds, or a float for a model trained once."""
    runs: list[str | None]
    """The run of each read (None for a constant)."""
    paired: bool
    seeds: dict[str, int]


def gather(claim: Claim, reads: tuple[str, ...]) -> Sample:
    """The values `reads` take: within a run, the seeds where every quantity read of it is finite; across runs,
    paired by seed where every run has the same seeds (the arms of one experiment group), else each run on its own."""
    runs = [None if set(claim.quantities[r]) == {None} else claim.runs[r] for r in reads]
    seeds: dict[str, list] = {}
    for read, run in zip(reads, runs):
        if run is None:
            continue
        finite = {s for s, v in claim.quantities[read].items() if math.isfinite(v)}
        seeds[run] = sorted(finite if run not in seeds else finite & set(seeds[run]))
    paired = len({tuple(s) for s in seeds.values()}) == 1
    values = [float(claim.quantities[r][None]) if run is None else
              np.array([claim.quantities[r][s] for s in seeds[run]], dtype=float) for r, run in zip(reads, runs)]
    return Sample(values, runs, paired, {run: len(s) for run, s in seeds.items()})


@dataclass
class Effect:
    """sum_i w_i mean(reads_i) (or, with `ratio`, mean(reads_0) / mean(reads_1) of two positive quantities, on the
    log scale), with up to two statements: `direction` (the effect lies on the `op` side of 0, or of 1 for a ratio,
    by an exact rank test of reads_0 against reads_1, or of reads_0 against 0) and `magnitude` (its interval lies on
    the `op` side of `threshold`)."""

    label: str
    reads: tuple[str, ...]
    weights: tuple[float, ...] = (1.0, -1.0)
    ratio: bool = False
    direction: str | None = None
    magnitude: str | None = None
    op: str = ">"
    threshold: float = 0.0
    bounds: tuple[float, float] = (-math.inf, math.inf)
    """The values the effect can take (a share: 0 to 1), where its interval ends at the latest."""

    @property
    def null(self) -> float:
        return 1.0 if self.ratio else 0.0

    def estimate(self, sample: Sample) -> Estimate:
        arrays = [v for v in sample.values if isinstance(v, np.ndarray)]
        if any(len(a) == 0 for a in arrays) or not arrays:
            return Estimate(math.nan, math.nan, math.nan)
        if self.ratio:
            return log_ratio(sample.values[0], sample.values[1], sample.paired)
        constant = sum(w * v for w, v in zip(self.weights, sample.values) if not isinstance(v, np.ndarray))
        if sample.paired:
            return contrast(arrays, [w for w, v in zip(self.weights, sample.values) if isinstance(v, np.ndarray)],
                            constant, paired=True)
        by_run: dict[str, np.ndarray] = {}  # each run's quantities combined seed by seed, then the runs' by Welch
        for w, v, run in zip(self.weights, sample.values, sample.runs):
            if run is not None:
                by_run[run] = by_run.get(run, 0.0) + w * v
        return contrast(list(by_run.values()), [1.0] * len(by_run), constant)

    def evaluate(self, claim: Claim) -> list[Test]:
        sample = gather(claim, self.reads)
        est = self.estimate(sample)
        interval = t_interval(est, claim.settings.confidence, self.bounds)
        paired = "paired by seed" if est.paired else "Welch"
        method = f"{'log-scale ' if est.log else ''}{paired} t" + (f" (df {est.df:.3g})" if math.isfinite(est.df)
                                                                 else "")
        tests = []
        if self.direction:
            tests.append(self._direction(claim, sample, est, interval))
        if self.magnitude:
            tests.append(Test(self.magnitude, "magnitude", self.label, interval, self.op, self.threshold,
                              side(interval, self.op, self.threshold), method, sample.seeds,
                              seeds_for_power(est, self.threshold, claim.settings.confidence),
                              SIDES[self.op](interval.estimate, self.threshold)))
        return tests

    def _direction(self, claim: Claim, sample: Sample, est: Estimate, interval: Interval) -> Test:
        a, b = sample.values[0], sample.values[1] if len(sample.values) > 1 else None
        one = b is None or not isinstance(b, np.ndarray)
        if not isinstance(a, np.ndarray) or math.isnan(interval.estimate):
            return Test(self.direction, "direction", self.label, interval, self.op, self.null, NOT_MEASURABLE,
                        "rank test", sample.seeds, math.nan, False)
        if b is not None and not isinstance(b, np.ndarray):
            a, b = a - b, None  # against a model trained once: its values less the constant
        settings = claim.settings
        rank = rank_test(a, b, sample.paired, "greater" if self.op in GREATER else "less", settings)
        needed = seeds_for_power(est, self.null, settings.confidence)
        if math.isfinite(needed):
            needed = max(needed, float(fewest_for_rank(one or sample.paired, settings.tail)))
        return Test(self.direction, "direction", self.label, interval, self.op, self.null,
                    rank_verdict(rank, settings.tail), f"{rank.method}, exact", sample.seeds, needed,
                    SIDES[self.op](interval.estimate, self.null), rank.p, rank.p_other, rank.smallest)


@dataclass
class Similar(Effect):
    """"Similar": the signed difference mean(reads_0) - mean(reads_1) within +-share x mean(`scale`) (e.g. 20% of
    PPO's task-reward gain; the margin's own spread is not carried), by two one-sided tests."""

    scale: str = ""
    share: float = 0.2

    def evaluate(self, claim: Claim) -> list[Test]:
        sample = gather(claim, self.reads)
        est = self.estimate(sample)
        interval = t_interval(est, claim.settings.confidence)
        scale = [v for v in claim.quantities[self.scale].values() if math.isfinite(v)]
        margin = self.share * abs(float(np.mean(scale))) if scale else math.nan
        nearer = math.copysign(margin, est.value) if math.isfinite(est.value) else math.nan
        method = f"two one-sided tests, {'paired by seed' if est.paired else 'Welch'} t"
        return [Test(self.magnitude or self.label, "similar", self.label, interval, "within", margin,
                     within(interval, margin), method, sample.seeds,
                     seeds_for_power(est, nearer, claim.settings.confidence), abs(interval.estimate) < margin)]


@dataclass
class Rate(Effect):
    """The rate of a 0/1 quantity over a run's seeds, its Clopper-Pearson interval on the `op` side of `threshold`."""

    def counts(self, claim: Claim) -> tuple[int, int]:
        values = [v for v in claim.quantities[self.reads[0]].values() if math.isfinite(v)]
        return int(sum(values)), len(values)

    def evaluate(self, claim: Claim) -> list[Test]:
        k, n = self.counts(claim)
        conf = claim.settings.confidence
        interval = Interval(k / n, *clopper_pearson(k, n, conf)) if n else Interval(math.nan, math.nan, math.nan)
        return [Test(self.magnitude or self.label, "rate", self.label, interval, self.op, self.threshold,
                     side(interval, self.op, self.threshold), f"Clopper-Pearson, {k} of {n}",
                     {claim.runs[self.reads[0]]: n}, rate_seeds_for_power(k, n, self.threshold, conf),
                     bool(n) and SIDES[self.op](k / n, self.threshold))]


@dataclass
class RateDifference(Effect):
    """rate(reads_0) - rate(reads_1) of two runs' 0/1 quantities, above 0, with the exact interval of
    cory.report.rates.rate_difference."""

    def evaluate(self, claim: Claim) -> list[Test]:
        (k1, n1), (k2, n2) = (Rate(self.label, (r,)).counts(claim) for r in self.reads)
        conf = claim.settings.confidence
        interval = rate_difference(k1, n1, k2, n2, conf)
        seeds = {claim.runs[self.reads[0]]: n1, claim.runs[self.reads[1]]: n2}
        return [Test(self.direction or self.label, "rate", self.label, interval, ">", 0.0, side(interval, ">", 0.0),
                     "exact unconditional", seeds, rate_difference_seeds_for_power(k1, n1, k2, n2, conf),
                     interval.estimate > 0, smallest_p=smallest_rate_p(n1, n2))]


def every_one(tests: list[Test]) -> str:
    """A claim's verdict where each of its statements must hold (cory.report.stats.combine)."""
    return combine([t.verdict for t in tests])


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
    """label -> the run it comes from (quantities of one run pair seed by seed)."""
    effects: list[Effect] = field(default_factory=list)
    paper_values: dict[str, PaperValue] = field(default_factory=dict)
    """label -> the paper's number; a label equal to a quantity's or an effect's is shown beside it."""
    notes: list[str] = field(default_factory=list)
    """Lines printed under the verdict (e.g. each method's collapse rate)."""
    settings: Settings = Settings()
    tested: bool = True
    """False where params report.test_claims is false: the numbers are shown, the verdict is "not tested"."""
    absent: str = ""
    """Why this profile cannot test the claim (a run or group it lacks): its verdict is then "not tested"."""
    decide: Callable[[list[Test]], str] = every_one
    """The claim's verdict from its statements' (every one must hold, unless the claim's rule says otherwise)."""

    @property
    def seeds(self) -> list[int]:
        """Every seed some seeded quantity has (unseeded ones, e.g. the base model's, join every seed)."""
        return sorted(set().union(*(set(v) - {None} for v in self.quantities.values())))

    @cached_property
    def results(self) -> list[Test]:
        return [test for effect in self.effects for test in effect.evaluate(self)]

    @property
    def measured_verdict(self) -> str:
        """The verdict the statements give, whether or not the profile tests claims."""
        return self.decide(self.results)

    @property
    def verdict(self) -> str:
        return self.measured_verdict if self.tested and not self.absent else NOT_TESTED

    @property
    def seeds_used(self) -> dict[str, int]:
        """run -> the fewest seeds any statement could use of it."""
        used: dict[str, int] = {}
        for r in self.results:
            for run, n in r.seeds.items():
                used[run] = min(n, used.get(run, n))
        return used

    @property
    def seeds_needed(self) -> float:
        """Seeds per run for a decided verdict with 80% power: where every estimate lies on its statement's side, the
        most any statement needs (all must hold); else the fewest one on the other side needs (one that did not hold
        decides the claim). NaN where a needed count is unknown."""
        against = [r.seeds_needed for r in self.results if not r.on_side]
        counts = against or [r.seeds_needed for r in self.results]
        if not counts or any(math.isnan(c) for c in counts):
            return math.nan
        return min(counts) if against else max(counts)

    def means(self) -> dict[str, float]:
        """label -> mean over the seeds where it is finite (NaN without any)."""
        finite = {label: [x for x in v.values() if math.isfinite(x)] for label, v in self.quantities.items()}
        return {label: float(np.mean(x)) if x else math.nan for label, x in finite.items()}
