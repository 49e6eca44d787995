"""Rates of seeds (k of n seeds collapsed): exact intervals, and the seeds a verdict on them needs at 80% power.

A bootstrap of 3 seeds that all collapsed would give the interval [1, 1]; these do not. One rate gets the
Clopper-Pearson interval (scipy.stats.binomtest). A difference of two independent runs' rates gets the interval that
inverts an exact unconditional test: each end is where a one-sided test (the statistic the difference itself, the
common nuisance rate maximised over) at (1 - confidence) / 2 stops rejecting. 3 of 3 seeds against 0 of 3 clears 0 at
95% (p = 1/64 at the worst common rate, 1/2); 2 of 3 against 0 of 3 does not.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from cory.report.stats import POWER, Interval


def clopper_pearson(k, n: int, confidence: float):
    """The exact interval of a rate from k successes in n trials (each end excludes at most (1 - confidence) / 2, the
    beta quantiles scipy.stats.binomtest's "exact" interval takes); (0, 1) for n = 0. `k` may be an array."""
    from scipy.stats import beta

    if n == 0:
        return 0.0, 1.0
    tail = (1 - confidence) / 2
    k = np.asarray(k)
    with np.errstate(invalid="ignore"):
        low = np.where(k > 0, beta.ppf(tail, k, n - k + 1), 0.0)
        high = np.where(k < n, beta.ppf(1 - tail, k + 1, n - k), 1.0)
    return (float(low), float(high)) if low.ndim == 0 else (low, high)


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
    """k1/n1 - k2/n2 of two independent runs' seeds with its exact interval (see the module docstring)."""
    if n1 == 0 or n2 == 0:
        return Interval(math.nan, math.nan, math.nan)
    tail = (1 - confidence) / 2
    return Interval(k1 / n1 - k2 / n2, _lower_bound(k1, n1, k2, n2, tail), -_lower_bound(k2, n2, k1, n1, tail))


def rate_difference_clears_zero(k1: int, n1: int, k2: int, n2: int, confidence: float) -> bool:
    """Whether `rate_difference`'s interval excludes 0, from the exact test at 0 alone (quick, for seed counts)."""
    tail = (1 - confidence) / 2
    return _upper_tail(k1, n1, k2, n2, 0.0) <= tail or _upper_tail(k2, n2, k1, n1, 0.0) <= tail


def smallest_rate_p(n1: int, n2: int) -> float:
    """The smallest one-sided p of the exact unconditional test at n1 and n2 seeds: n1 of n1 against 0 of n2."""
    return _upper_tail(n1, n1, 0, n2, 0.0) if n1 and n2 else 1.0


def _binomial(m: int, p: float) -> np.ndarray:
    from scipy.stats import binom

    return binom.pmf(np.arange(m + 1), m, p)


def rate_seeds_for_power(k: int, n: int, threshold: float, confidence: float, power: float = POWER,
                         most: int = 200) -> float:
    """Seeds for the Clopper-Pearson interval of one rate to clear `threshold` on the side of the observed rate with
    probability `power`, were the rate the observed one: the fewest m with P(interval beyond threshold) >= power,
    summed exactly over the binomial outcomes; inf on the threshold or beyond `most`; NaN without seeds."""
    if n == 0:
        return math.nan
    rate = k / n
    if rate == threshold:
        return math.inf
    for m in range(1, most + 1):
        low, high = clopper_pearson(np.arange(m + 1), m, confidence)
        clears = (low > threshold) if rate > threshold else (high < threshold)
        if float(_binomial(m, rate) @ clears) >= power:
            return float(m)
    return math.inf


@lru_cache(maxsize=None)
def _clears_from(m: int, confidence: float, grid: int = 201) -> int:
    """The smallest k1 - k2 at which k1 of m seeds against k2 of m clears 0 (the exact unconditional test at the
    statistic's value; at equal seed counts it depends on k1 - k2 alone): m + 1 where none does."""
    tail = (1 - confidence) / 2
    p = np.linspace(0.0, 1.0, grid)[:, None]
    x = np.arange(m + 1)
    pmf = np.array([math.comb(m, i) for i in x]) * p**x * (1 - p) ** (m - x)  # (grid, m + 1)
    # P(X1 - X2 = s) for s = -m..m at each common rate, then P(X1 - X2 >= s)
    difference = np.array([np.convolve(row, row[::-1]) for row in pmf])
    survival = np.cumsum(difference[:, ::-1], axis=1)[:, ::-1].max(axis=0)  # worst common rate
    cleared = np.flatnonzero(survival[m:] <= tail)  # s = 0..m
    return int(cleared[0]) if len(cleared) else m + 1


def rate_difference_seeds_for_power(k1: int, n1: int, k2: int, n2: int, confidence: float, power: float = POWER,
                                    most: int = 100) -> float:
    """Seeds per run for `rate_difference`'s interval to clear 0 on the side of the observed difference with
    probability `power`, were the rates the observed ones (exact: summed over both runs' binomial outcomes); inf where
    the rates are equal or beyond `most`; NaN without seeds."""
    if n1 == 0 or n2 == 0:
        return math.nan
    r1, r2 = k1 / n1, k2 / n2
    if r1 == r2:
        return math.inf
    high, low = max(r1, r2), min(r1, r2)
    for m in range(2, most + 1):
        x = np.arange(m + 1)
        clears = (x[:, None] - x[None, :]) >= _clears_from(m, confidence)
        if float(_binomial(m, high) @ clears @ _binomial(m, low)) >= power:
            return float(m)
    return math.inf


def rate_interval(k: int, n: int, confidence: float) -> Interval:
    """The rate k / n with its Clopper-Pearson interval (NaN without seeds)."""
    if n == 0:
        return Interval(math.nan, math.nan, math.nan)
    low, high = clopper_pearson(k, n, confidence)
    return Interval(k / n, low, high)

