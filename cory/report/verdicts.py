"""An effect of a claim and its verdict: a number computed from the seed means of some quantities, its interval over
seeds (cory.report.stats), and the side of a threshold the claim puts it on; a Claim gathers its effects, quantities
and the paper's numbers, and combines the effects' verdicts into its own."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from cory.report.stats import (
    NOT_TESTED,
    SIDES,
    Bootstrap,
    Interval,
    bootstrap_interval,
    combine,
    rate_difference,
    seeds_needed,
    seeds_needed_for_rates,
    side,
)

PerSeed = dict
"""seed -> value; the seed None marks a model trained once (the base model), the same for every seed."""




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
    bounds: tuple[float, float] = (-math.inf, math.inf)
    """The values the effect can take (a share: 0 to 1), where its interval ends at the latest."""
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
        return (bootstrap_interval(list(arrays.values()), in_reads_order, claim.bootstrap, tuple(constants),
                                   self.bounds),
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
