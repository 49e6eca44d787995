"""The statistics behind the verdicts: intervals over seeds, the side of a threshold an interval lies on, and how many
seeds an interval needs.

A claim's effect is one number computed from seed means (e.g. PPO's mean final KL over CORY's). Its interval is a
percentile bootstrap over seeds: each run's seeds are drawn with replacement, independently of every other run's
(runs of different algorithms share no randomness, so pairing them by seed number would invent a correlation), while
quantities of one run (LLM1 and LLM2 of one CORY run) are drawn together, seed by seed. A fixed generator seed makes
a report reproducible. With few seeds the plain percentile interval is too narrow (a bootstrap's spread is the
plug-in one, and a normal quantile stands where Student's t belongs), so its percentiles are those of Hesterberg's
expanded percentile interval (`expanded_alpha`; Hesterberg 2015, "What teachers should know about the bootstrap",
The American Statistician 69(4)), at the fewest seeds of the effect's runs. At 3 seeds that level lies beyond every
draw, and the draws end at the seeds' extremes: the range of 3 seeds holds their median only 75% of the time (each
seed falls on either side of it with probability 1/2). So the interval is never narrower than Student's t interval
on the bootstrap's standard error (`student_half_width`), which for a mean is the textbook one. Rates (k of n seeds)
get exact intervals instead (Clopper-Pearson for one rate, an exact unconditional test inverted for a difference of
two): a bootstrap of 3 seeds that all collapsed would give [1, 1].

Everything here is a pure function of numbers; cory.report.claims turns runs into those numbers.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

HELD, NOT_HELD, INCONCLUSIVE = "held", "did not hold", "inconclusive"
NOT_MEASURABLE, NOT_TESTED = "not measurable", "not tested"

SIDES: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
"""The side of its threshold an effect must lie on for the claim to hold."""


@dataclass(frozen=True)
class Bootstrap:
    """How intervals are drawn (params report.confidence, report.bootstrap_draws, report.bootstrap_seed)."""

    confidence: float = 0.95
    draws: int = 10000
    seed: int = 0


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval; `se` is the standard deviation of the bootstrap draws (NaN for exact
    intervals). low and high are NaN where no interval exists (a run with fewer than 2 seeds)."""

    estimate: float
    low: float
    high: float
    se: float = math.nan


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(p, df))


def expanded_alpha(confidence: float, n: int) -> float:
    """The two-sided level whose percentile interval of a bootstrap over n seeds has about the coverage `confidence`
    asks for (Hesterberg's expanded percentile interval): alpha' = 2 Phi(-sqrt(n / (n-1)) t_{1 - alpha/2, n-1}), which
    widens the interval by the t quantile over the normal one and by the bootstrap's shrinkage of the spread. 95% at
    3 seeds: 1.4e-7 (the ends of the draws); at 4: 2.4e-4; at 8: 0.011; as n grows, 1 - confidence."""
    alpha = 1 - confidence
    return 2 * NormalDist().cdf(-math.sqrt(n / (n - 1)) * t_quantile(1 - alpha / 2, n - 1))


def resampled_means(values: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(draws, quantities) means of `values` (seeds, quantities) over as many seeds drawn with replacement: the rows
    of one run are drawn together, so its quantities keep their pairing."""
    n = values.shape[0]
    return values[rng.integers(0, n, size=(draws, n))].mean(axis=1)


def bootstrap_interval(runs: list[np.ndarray], formula: Callable[..., object], settings: Bootstrap,
                       constants: tuple[float, ...] = (), bounds: tuple[float, float] = (-math.inf, math.inf)
                       ) -> Interval:
    """The effect `formula(*means of run 0's columns, *means of run 1's columns, ..., *constants)` at the seed means,
    with its percentile interval over seeds drawn per run independently, at the expanded level of the runs' fewest
    seeds (`expanded_alpha`).

    `runs` holds one (seeds, quantities) array per run; `constants` are values without seeds (a base model trained
    once). `formula` must be elementwise (numpy), as it is called once with floats and once with one array per
    quantity holding every draw. The interval's ends are draws themselves (quantiles "lower" and "higher": never
    narrower than the percentiles), NaN where a run has fewer than 2 seeds or a draw has no value (a ratio 0/0).
    Student's widening stops at `bounds`, the values the effect can take (a share: 0 to 1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        point = float(formula(*(float(x) for v in runs for x in v.mean(axis=0)), *constants))
        if any(v.shape[0] < 2 for v in runs):
            return Interval(point, math.nan, math.nan)
        rng = np.random.default_rng(settings.seed)
        columns = [m for v in runs for m in resampled_means(v, settings.draws, rng).T]
        draws = np.broadcast_to(np.asarray(formula(*columns, *constants), dtype=float), (settings.draws,))
    if np.isnan(draws).any():
        return Interval(point, math.nan, math.nan)
    n = min(v.shape[0] for v in runs)
    alpha = expanded_alpha(settings.confidence, n)
    finite = draws[np.isfinite(draws)]
    se = float(np.std(finite)) if len(finite) == len(draws) else math.inf
    low = float(np.quantile(draws, alpha / 2, method="lower"))
    high = float(np.quantile(draws, 1 - alpha / 2, method="higher"))
    if math.isfinite(se):  # no narrower than Student's t, which the draws of a few seeds cannot reach
        half = student_half_width(se, n, settings.confidence)
        low, high = max(min(low, point - half), bounds[0]), min(max(high, point + half), bounds[1])
    return Interval(point, low, high, se)


def student_half_width(se: float, n: int, confidence: float) -> float:
    """Half the width of Student's t interval at n seeds from a bootstrap standard error: t_{1 - alpha/2, n-1} x se x
    sqrt(n / (n-1)) (the bootstrap's spread is the plug-in one, sqrt((n-1) / n) of the sample's). For one run's mean
    it is the textbook t interval; for a difference of two runs' means, Welch's at the fewer seeds' degrees of freedom."""
    return t_quantile(1 - (1 - confidence) / 2, n - 1) * se * math.sqrt(n / (n - 1))


def side(interval: Interval, op: str, threshold: float) -> str:
    """held: every point of the interval is on the claim's side of the threshold (`x op threshold`); did not hold:
    none is; inconclusive: the interval contains the threshold, or there is none; not measurable: no estimate."""
    if math.isnan(interval.estimate):
        return NOT_MEASURABLE
    if math.isnan(interval.low) or math.isnan(interval.high):
        return INCONCLUSIVE
    ends = [SIDES[op](x, threshold) for x in (interval.low, interval.high)]
    return HELD if all(ends) else NOT_HELD if not any(ends) else INCONCLUSIVE


def combine(verdicts: list[str]) -> str:
    """A claim of several sub-conditions (LLM1 and LLM2): held if every one is held, did not hold if any did not,
    not measurable if none is measurable, else inconclusive."""
    if not verdicts or all(v == NOT_MEASURABLE for v in verdicts):
        return NOT_MEASURABLE
    if NOT_HELD in verdicts:
        return NOT_HELD
    return HELD if all(v == HELD for v in verdicts) else INCONCLUSIVE


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def _bisect(f: Callable[[float], float], target: float, increasing: bool) -> float:
    """The p in [0, 1] where the monotone f(p) crosses `target` (to 1e-12)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The exact interval of a rate from k successes in n trials: each end excludes at most (1 - confidence) / 2
    (P(X >= k | low) = P(X <= k | high) = (1 - confidence) / 2); (0, 1) for n = 0."""
    if n == 0:
        return 0.0, 1.0
    tail = (1 - confidence) / 2
    low = 0.0 if k == 0 else _bisect(lambda p: 1 - _binomial_cdf(k - 1, n, p), tail, increasing=True)
    high = 1.0 if k == n else _bisect(lambda p: _binomial_cdf(k, n, p), tail, increasing=False)
    return low, high


def _upper_tail(k1: int, n1: int, k2: int, n2: int, delta: float, grid: int = 201) -> float:
    """The exact unconditional p-value of k1/n1 - k2/n2 against rate differences of `delta`: the largest
    P(X1/n1 - X2/n2 >= k1/n1 - k2/n2) over rates p1 = p2 + delta (p2 on a grid of `grid` points)."""
    p2 = np.linspace(max(0.0, -delta), min(1.0, 1.0 - delta), grid)
    p1 = np.clip(p2 + delta, 0.0, 1.0)
    i, j = np.arange(n1 + 1), np.arange(n2 + 1)
    pmf1 = np.array([math.comb(n1, x) for x in i]) * p1[:, None] ** i * (1 - p1[:, None]) ** (n1 - i)
    pmf2 = np.array([math.comb(n2, x) for x in j]) * p2[:, None] ** j * (1 - p2[:, None]) ** (n2 - j)
    extreme = (i[:, None] / n1 - j[None, :] / n2) >= k1 / n1 - k2 / n2 - 1e-12
    return float(np.einsum("gi,ij,gj->g", pmf1, extreme.astype(float), pmf2).max())


def _lower_bound(k1: int, n1: int, k2: int, n2: int, tail: float) -> float:
    """The smallest rate difference the one-sided exact unconditional test at level `tail` does not reject: a
    scan over [-1, 1], then bisection within the step where the test stops rejecting."""
    deltas = np.linspace(-1.0, 1.0, 81)
    accepted = [d for d in deltas if _upper_tail(k1, n1, k2, n2, d) > tail]
    first = float(accepted[0]) if accepted else k1 / n1 - k2 / n2
    lo, hi = max(-1.0, first - 2.0 / 80), first
    if hi <= -1.0:
        return -1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _upper_tail(k1, n1, k2, n2, mid) > tail else (mid, hi)
    return lo


def rate_difference(k1: int, n1: int, k2: int, n2: int, confidence: float) -> Interval:
    """k1/n1 - k2/n2 of two independent runs' seeds with its exact interval: each end is where a one-sided exact
    unconditional test (the statistic the difference itself, the nuisance rate maximised over) at (1 - confidence) / 2
    stops rejecting. Unlike a bootstrap it does not collapse to a point when every seed agrees: 3 of 3 against 0 of 3
    clears 0 at 95% (p = 1/64 at the worst common rate, 1/2), 2 of 3 against 0 of 3 does not."""
    if n1 == 0 or n2 == 0:
        return Interval(math.nan, math.nan, math.nan)
    tail = (1 - confidence) / 2
    return Interval(k1 / n1 - k2 / n2, _lower_bound(k1, n1, k2, n2, tail), -_lower_bound(k2, n2, k1, n1, tail))


def rate_difference_clears_zero(k1: int, n1: int, k2: int, n2: int, confidence: float) -> bool:
    """Whether `rate_difference`'s interval excludes 0, from the exact test at 0 alone (quick, for seed counts)."""
    tail = (1 - confidence) / 2
    return _upper_tail(k1, n1, k2, n2, 0.0) <= tail or _upper_tail(k2, n2, k1, n1, 0.0) <= tail


def z_value(confidence: float) -> float:
    """The two-sided normal quantile of a confidence level (1.96 at 0.95)."""
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def seeds_needed(interval: Interval, threshold: float, n: int, confidence: float) -> float:
    """Seeds per run for the interval to clear the threshold on the side of its estimate, if the spread stays as
    measured: the bootstrap standard error, corrected for the bootstrap's small-sample shrinkage (x sqrt(n / (n-1))),
    shrinks as 1/sqrt(seeds), and the expanded interval at m seeds reaches about t_{m-1} x se' x sqrt(n / m), so m is
    the fewest with t_{m-1} se' sqrt(n / m) < |estimate - threshold| (at least the normal quantile's n (z se' / gap)^2).
    At least 2 (the fewest with a spread), and 2 where the draws do not spread at all; inf where the estimate is the
    threshold; NaN under 2 seeds or with an infinite spread."""
    gap = abs(interval.estimate - threshold)
    if n < 2 or math.isnan(gap):
        return math.nan
    if interval.low == interval.high:  # the draws do not spread (every seed alike, or every draw infinite)
        return 2.0
    if not math.isfinite(interval.se):
        return math.nan
    if gap == 0:
        return math.inf
    se = interval.se * math.sqrt(n / (n - 1))
    tail = 1 - (1 - confidence) / 2
    # t > z: never fewer than the normal quantile's count, and within a few seeds of it once t is near z
    m = max(2, math.ceil(n * (z_value(confidence) * se / gap) ** 2))
    while t_quantile(tail, m - 1) * se * math.sqrt(n / m) >= gap:
        m += 1
    return float(m)


def seeds_needed_for_rates(k1: int, n1: int, k2: int, n2: int, confidence: float, most: int = 50) -> float:
    """Seeds per run for `rate_difference` to clear 0 on the side of the observed difference, if the observed rates
    held at every seed count (k = rate x m, rounded): the smallest such m up to `most`; inf if none; NaN without
    seeds."""
    if n1 == 0 or n2 == 0:
        return math.nan
    r1, r2 = k1 / n1, k2 / n2
    if r1 == r2:
        return math.inf
    for m in range(2, most + 1):
        if rate_difference_clears_zero(round(r1 * m), m, round(r2 * m), m, confidence):
            return float(m)
    return math.inf
