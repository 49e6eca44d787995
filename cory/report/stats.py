"""The statistics behind the verdicts: t intervals of contrasts of run means, log-scale intervals of ratios, exact rank
tests of a direction, two one-sided tests of "similar", and the seeds a verdict needs at 80% power. Rates of seeds
(k of n collapsed) are in cory.report.rates.

Seeds pair. Runs of one experiment group with the same seed number share more than the number: the run seed drives
the response-length stream (cory.rl.trainer) and whatever else it fixes, so two arms' final values correlate seed by
seed (on the scratch IMDB model, final KLs of PPO and of the CORY variants at Spearman 0.79-0.88). So where the arms of
an effect have the same seeds, the effect is computed seed by seed and its interval is Student's t on those per-seed
values (n - 1 degrees of freedom); otherwise the arms are independent samples and the interval is Welch's, with
Satterthwaite's degrees of freedom. A ratio of two positive means (PPO's KL over CORY's) is analysed on the log scale
(the delta method: log(m_a / m_b) with its standard error, the interval taken back by exp), so its interval never
reaches below 0 and is not the symmetric interval of a heavy-tailed ratio.

A direction ("lower than", "rises") is decided by an exact rank test: the signed-rank test of the per-seed differences
where seeds pair (or of one run's values against the null), the rank-sum test of two independent arms, each an exact
permutation test of the ranks (scipy.stats.permutation_test). Its p-value cannot fall below the chance of the most
extreme ranking: 1 / 2^n for n pairs, 1 / C(n_a + n_b, n_a) for two arms (1/20 = 0.05 at 3 against 3), so a seed count
whose smallest p is above (1 - confidence) / 2 cannot decide a direction, and the report says so.

A magnitude (more than 2x, at least a margin) is decided by the interval: held where the whole interval lies on the
claim's side of its threshold, did not hold where it lies on the other side. "Similar" is two one-sided tests of the
signed difference: held where the interval lies within +-margin, did not hold where it lies wholly beyond one of them.

Everything here is a pure function of numbers; cory.report.verdicts turns a claim's quantities into them.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

HELD, NOT_HELD, INCONCLUSIVE = "held", "did not hold", "inconclusive"
NOT_MEASURABLE, NOT_TESTED = "not measurable", "not tested"

SIDES: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
"""The side of its threshold an effect must lie on for the claim to hold."""

POWER = 0.8
"""The chance of a decided verdict that "seeds needed" asks for."""


@dataclass(frozen=True)
class Settings:
    """How intervals and tests are computed (params report.confidence, report.permutations, report.permutation_seed)."""

    confidence: float = 0.95
    permutations: int = 100_000
    """Rank tests enumerate every permutation up to this many (exact), else draw this many (seeded)."""
    seed: int = 0

    @property
    def tail(self) -> float:
        """The level of each one-sided test: (1 - confidence) / 2 (0.025 at 95%)."""
        return (1 - self.confidence) / 2


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval; low and high are NaN where no interval exists (fewer than 2 seeds)."""

    estimate: float
    low: float
    high: float


@dataclass(frozen=True)
class Estimate:
    """An effect on its analysis scale (the log scale for a ratio): the value, its standard error and degrees of
    freedom, and the per-seed variance terms that scale it to another seed count (`seeds_for_power`)."""

    value: float
    se: float
    df: float
    log: bool = False
    terms: tuple[float, ...] = ()
    """Variance per seed of each independent arm (w_i^2 s_i^2; one term, the per-seed values' variance, if paired)."""
    paired: bool = False

    @property
    def natural(self) -> float:
        """The estimate on the effect's own scale."""
        return math.exp(self.value) if self.log else self.value


NO_ESTIMATE = Estimate(math.nan, math.nan, math.nan)


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(p, df))


def satterthwaite(variances: Sequence[float], counts: Sequence[int]) -> float:
    """Welch-Satterthwaite degrees of freedom of sum_i v_i / n_i (v_i: each arm's variance, its weight squared in)."""
    parts = [v / n for v, n in zip(variances, counts)]
    denominator = sum(p * p / (n - 1) for p, n in zip(parts, counts))
    return sum(parts) ** 2 / denominator if denominator > 0 else float(min(counts) - 1)


def contrast(samples: Sequence[np.ndarray], weights: Sequence[float], constant: float = 0.0,
             paired: bool = False) -> Estimate:
    """sum_i w_i mean(samples_i) + constant. Paired (every sample over the same seeds, in order): the t estimate of
    the per-seed values sum_i w_i x_i; else Welch's, each sample its own arm. NaN without 2 values in some arm."""
    samples = [np.asarray(s, dtype=float) for s in samples]
    if paired:
        per_seed = sum(w * s for w, s in zip(weights, samples)) + constant
        n = len(per_seed)
        if n < 2:
            return Estimate(float(np.mean(per_seed)) if n else math.nan, math.nan, math.nan, paired=True)
        var = float(np.var(per_seed, ddof=1))
        return Estimate(float(np.mean(per_seed)), math.sqrt(var / n), n - 1, terms=(var,), paired=True)
    value = sum(w * float(np.mean(s)) for w, s in zip(weights, samples)) + constant if all(len(s) for s in samples) \
        else math.nan
    counts = [len(s) for s in samples]
    if min(counts) < 2:
        return Estimate(value, math.nan, math.nan)
    terms = tuple(w * w * float(np.var(s, ddof=1)) for w, s in zip(weights, samples))
    return Estimate(value, math.sqrt(sum(v / n for v, n in zip(terms, counts))), satterthwaite(terms, counts),
                    terms=terms)


def log_ratio(a: np.ndarray, b: np.ndarray, paired: bool = False) -> Estimate:
    """log(mean a / mean b) of two positive quantities by the delta method: var = var(a)/(n m_a^2) + var(b)/(n m_b^2),
    less the covariance term where paired (computed as the variance of a/m_a - b/m_b seed by seed). NaN where a mean
    is not positive (no log scale)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not (len(a) and len(b)) or np.mean(a) <= 0 or np.mean(b) <= 0:
        return NO_ESTIMATE
    ma, mb = float(np.mean(a)), float(np.mean(b))
    value = math.log(ma / mb)
    if paired:
        linear = contrast([a / ma, b / mb], [1.0, -1.0], paired=True)
        return Estimate(value, linear.se, linear.df, log=True, terms=linear.terms, paired=True)
    linear = contrast([a / ma, b / mb], [1.0, -1.0])
    return Estimate(value, linear.se, linear.df, log=True, terms=linear.terms)


def t_interval(est: Estimate, confidence: float, bounds: tuple[float, float] = (-math.inf, math.inf)) -> Interval:
    """The estimate +- t_{1 - alpha/2, df} x se, taken back from the log scale where it is one, within `bounds` (the
    values the effect can take). No interval without a standard error; a point where the spread is 0."""
    estimate = est.natural
    if math.isnan(est.se) or math.isnan(est.value):
        return Interval(estimate, math.nan, math.nan)
    half = t_quantile(1 - (1 - confidence) / 2, est.df) * est.se if est.se > 0 else 0.0
    low, high = est.value - half, est.value + half
    if est.log:
        low, high = math.exp(low), math.exp(high)
    return Interval(estimate, max(low, bounds[0]), min(high, bounds[1]))


def side(interval: Interval, op: str, threshold: float) -> str:
    """held: every point of the interval is on the claim's side of the threshold (`x op threshold`); did not hold:
    none is; inconclusive: the interval contains the threshold, or there is none; not measurable: no estimate."""
    if math.isnan(interval.estimate):
        return NOT_MEASURABLE
    if math.isnan(interval.low) or math.isnan(interval.high):
        return INCONCLUSIVE
    ends = [SIDES[op](x, threshold) for x in (interval.low, interval.high)]
    return HELD if all(ends) else NOT_HELD if not any(ends) else INCONCLUSIVE


def within(interval: Interval, margin: float) -> str:
    """Two one-sided tests of "similar", each at (1 - confidence) / 2: held where the interval of the signed
    difference lies within (-margin, margin); did not hold where it lies wholly at or beyond one of them."""
    if math.isnan(interval.estimate):
        return NOT_MEASURABLE
    if math.isnan(interval.low) or math.isnan(margin):
        return INCONCLUSIVE
    if -margin < interval.low and interval.high < margin:
        return HELD
    return NOT_HELD if interval.low >= margin or interval.high <= -margin else INCONCLUSIVE


def combine(verdicts: list[str]) -> str:
    """A claim of several statements (direction and magnitude, LLM1 and LLM2): held if every one is held, did not
    hold if any did not, not measurable if none is measurable, else inconclusive."""
    if not verdicts or all(v == NOT_MEASURABLE for v in verdicts):
        return NOT_MEASURABLE
    if NOT_HELD in verdicts:
        return NOT_HELD
    return HELD if all(v == HELD for v in verdicts) else INCONCLUSIVE


@dataclass(frozen=True)
class RankTest:
    """An exact rank test of a direction: the one-sided p of the claim's direction, that of the other direction, and
    the smallest p its seed counts can reach."""

    p: float
    p_other: float
    smallest: float
    method: str


def smallest_p(n_a: int, n_b: int | None) -> float:
    """The smallest one-sided p of a rank test: 1 / 2^n for n pairs (or one run against a null), 1 / C(n_a + n_b,
    n_a) for two independent arms (ties only make it larger)."""
    if n_b is None:
        return 0.5 ** n_a if n_a else 1.0
    return 1 / math.comb(n_a + n_b, n_a) if n_a and n_b else 1.0


OTHER = {"greater": "less", "less": "greater"}


def rank_test(a: np.ndarray, b: np.ndarray | None, paired: bool, alternative: str, settings: Settings) -> RankTest:
    """Whether a lies above (alternative "greater") or below ("less") b: where b is None, a's values against 0;
    paired, the per-seed differences a - b; both by the signed-rank statistic (the ranks of |d|, each with d's sign;
    a zero difference adds nothing) under every flip of the signs. Unpaired, the rank-sum statistic under every
    split of the pooled ranks into the two arms. Exact up to settings.permutations arrangements (else that many
    drawn, seeded)."""
    from scipy.stats import permutation_test, rankdata

    a = np.asarray(a, dtype=float)
    options = {"n_resamples": settings.permutations, "vectorized": True, "random_state": settings.seed}
    if b is None or paired:
        d = a if b is None else a - np.asarray(b, dtype=float)
        if len(d) == 0:
            return RankTest(math.nan, math.nan, 1.0, "signed-rank")
        signed = np.sign(d) * rankdata(np.abs(d))
        smallest = smallest_p(int(np.count_nonzero(d)), None)
        if not signed.any():
            return RankTest(1.0, 1.0, smallest, "signed-rank")
        if len(d) == 1:  # one pair: its sign, flipped or not (scipy's test wants two)
            up = 0.5 if d[0] > 0 else 1.0
            return RankTest(*((up, 1.5 - up) if alternative == "greater" else (1.5 - up, up)), smallest, "signed-rank")
        p = {side: float(permutation_test((signed,), lambda x, axis=-1: np.sum(x, axis=axis),
                                          permutation_type="samples", alternative=side, **options).pvalue)
             for side in (alternative, OTHER[alternative])}
        return RankTest(p[alternative], p[OTHER[alternative]], smallest, "signed-rank")
    b = np.asarray(b, dtype=float)
    if len(a) == 0 or len(b) == 0:
        return RankTest(math.nan, math.nan, 1.0, "rank-sum")
    if len(a) == 1 and len(b) == 1:  # one seed each: which is above, or a tie (scipy's test wants two)
        up = 0.5 if a[0] > b[0] else 1.0 if a[0] < b[0] else 1.0
        down = 0.5 if a[0] < b[0] else 1.0
        return RankTest(*((up, down) if alternative == "greater" else (down, up)), 0.5, "rank-sum")
    ranks = rankdata(np.concatenate([a, b]))
    p = {side: float(permutation_test((ranks[: len(a)], ranks[len(a):]),
                                      lambda x, y, axis=-1: np.mean(x, axis=axis) - np.mean(y, axis=axis),
                                      alternative=side, **options).pvalue)
         for side in (alternative, OTHER[alternative])}
    return RankTest(p[alternative], p[OTHER[alternative]], smallest_p(len(a), len(b)), "rank-sum")


def rank_verdict(test: RankTest, tail: float) -> str:
    """held where the one-sided p of the claim's direction is at most `tail`, did not hold where that of the other
    direction is, else inconclusive."""
    if math.isnan(test.p):
        return NOT_MEASURABLE
    return HELD if test.p <= tail else NOT_HELD if test.p_other <= tail else INCONCLUSIVE


def fewest_for_rank(paired_or_one: bool, tail: float) -> int:
    """The fewest seeds per arm whose rank test can reach p <= tail: 6 pairs at 2.5% (1/64), 4 against 4 (1/70)."""
    m = 2
    while smallest_p(m, None if paired_or_one else m) > tail:
        m += 1
    return m


def seeds_for_power(est: Estimate, threshold: float, confidence: float, power: float = POWER,
                    most: int = 10_000) -> float:
    """Seeds per arm for the interval to clear `threshold` (on the effect's own scale) on the side of the estimate
    with probability `power`, if the effect were the estimate and each arm's spread as measured: the fewest m with
    P(T' > t_{1 - alpha/2, df_m}) >= power, T' noncentral t with noncentrality |estimate - threshold| / se_m, se_m and
    df_m the measured ones scaled to m seeds per arm (n - 1 if paired, Satterthwaite's otherwise). 2 where nothing
    spreads, inf on the threshold, NaN without a spread (under 2 seeds) or a scale (a threshold of 0 on a log
    scale). A spread measured on a few seeds is itself uncertain (the variance of 3 seeds spans x0.27 to x39.5 at
    95%), so the count is an estimate."""
    from scipy.stats import nct, t

    target = math.log(threshold) if est.log and threshold > 0 else math.nan if est.log else threshold
    gap = abs(est.value - target)
    if math.isnan(gap) or not est.terms:
        return math.nan
    total = sum(est.terms)
    if gap == 0:
        return math.inf
    if total == 0 or gap > 1e6 * math.sqrt(total):  # no spread (up to float rounding): the fewest with one
        return 2.0
    alpha_half = (1 - confidence) / 2
    start = 2
    while start <= most:  # in growing blocks: most counts are small, a few are thousands
        m = np.arange(start, min(4 * start, most + 1), dtype=float)
        terms = np.asarray(est.terms)
        df = m - 1 if est.paired else total**2 * (m - 1) / float(np.sum(terms**2))
        chance = nct.sf(t.ppf(1 - alpha_half, df), df, gap / np.sqrt(total / m))
        if (chance >= power).any():
            return float(m[np.argmax(chance >= power)])
        start = int(m[-1]) + 1
    return math.inf
