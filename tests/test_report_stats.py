"""The verdicts' statistics (cory.report.stats, cory.report.rates) against cases computed by hand and against scipy:
t intervals of contrasts (Welch-Satterthwaite, paired), log-scale ratios, exact rank tests and the smallest p a seed
count reaches, two one-sided tests, exact rate intervals, and the seeds a verdict needs at 80% power."""

import math

import numpy as np
import pytest
from scipy import stats as sp

from cory.report.rates import (
    _clears_from,
    clopper_pearson,
    rate_difference,
    rate_difference_clears_zero,
    rate_difference_seeds_for_power,
    rate_seeds_for_power,
    smallest_rate_p,
)
from cory.report.stats import (
    HELD,
    INCONCLUSIVE,
    NOT_HELD,
    NOT_MEASURABLE,
    Estimate,
    Interval,
    Settings,
    combine,
    contrast,
    fewest_for_rank,
    log_ratio,
    rank_test,
    rank_verdict,
    satterthwaite,
    seeds_for_power,
    side,
    smallest_p,
    t_interval,
    t_quantile,
    within,
)

SETTINGS = Settings()


def test_welchs_interval_is_scipys_with_satterthwaites_degrees_of_freedom():
    a, b = np.array([34.6, 27.7, 29.1]), np.array([24.2, 20.1, 16.8, 19.0])
    est = contrast([a, b], [1.0, -1.0])
    scipy = sp.ttest_ind(a, b, equal_var=False)
    assert est.df == pytest.approx(scipy.df) and est.value == pytest.approx(a.mean() - b.mean())
    ci = scipy.confidence_interval(0.95)
    assert (t_interval(est, 0.95).low, t_interval(est, 0.95).high) == pytest.approx((ci.low, ci.high))
    # by hand: variances 1 and 4 over 3 and 5 seeds: (1/3 + 4/5)^2 / ((1/3)^2 / 2 + (4/5)^2 / 4) = 7.18
    assert satterthwaite([1.0, 4.0], [3, 5]) == pytest.approx((1 / 3 + 4 / 5) ** 2 / ((1 / 3) ** 2 / 2 + 0.8**2 / 4))
    # a weighted contrast, PPO's fall - 2 x CORY's: var = s_P^2 / n + 4 s_C^2 / n
    two = contrast([a, b], [1.0, -2.0])
    assert two.value == pytest.approx(a.mean() - 2 * b.mean())
    assert two.se == pytest.approx(math.sqrt(a.var(ddof=1) / 3 + 4 * b.var(ddof=1) / 4))


def test_paired_and_one_run_intervals_are_scipys():
    a, b = np.array([1.0, 2.5, 2.0, 4.0]), np.array([0.5, 2.0, 2.2, 3.0])
    paired = contrast([a, b], [1.0, -1.0], paired=True)
    ci = sp.ttest_rel(a, b).confidence_interval(0.95)
    assert paired.df == 3 and paired.paired
    assert (t_interval(paired, 0.95).low, t_interval(paired, 0.95).high) == pytest.approx((ci.low, ci.high))
    one = contrast([a], [1.0], constant=-1.0)  # one run against a model trained once (value 1)
    ci = sp.ttest_1samp(a, 1.0).confidence_interval(0.95)
    assert (t_interval(one, 0.95).low + 1, t_interval(one, 0.95).high + 1) == pytest.approx((ci.low, ci.high))
    # a spread of 0: the interval is the point; under 2 seeds: none
    assert t_interval(contrast([np.ones(3)], [1.0]), 0.95) == Interval(1.0, 1.0, 1.0)
    assert math.isnan(t_interval(contrast([np.ones(1)], [1.0]), 0.95).low)


def test_a_ratio_of_positive_means_is_on_the_log_scale():
    # a = 2, 4, 6 (mean 4, var 4); b = 1, 2, 3 (mean 2, var 1): var(log ratio) = 4 / (3 16) + 1 / (3 4) = 1/6,
    # df = (1/6)^2 / ((1/12)^2 / 2 + (1/12)^2 / 2) = 4, so 2 exp(-+t_{0.975, 4} sqrt(1/6)) = [0.644, 6.21]
    est = log_ratio(np.array([2.0, 4.0, 6.0]), np.array([1.0, 2.0, 3.0]))
    assert est.log and est.df == pytest.approx(4.0) and est.se == pytest.approx(math.sqrt(1 / 6))
    iv = t_interval(est, 0.95)
    half = t_quantile(0.975, 4) * math.sqrt(1 / 6)
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((2.0, 2 * math.exp(-half), 2 * math.exp(half)))
    assert iv.low > 0  # never below 0, where the symmetric interval of the ratio would go: 2 -+ 2.78 x 0.82
    # paired: the delta method on a/m_a - b/m_b seed by seed; here they move together, so the ratio is exact
    together = log_ratio(np.array([2.0, 4.0, 6.0]), np.array([1.0, 2.0, 3.0]), paired=True)
    assert together.se == pytest.approx(0.0, abs=1e-12) and t_interval(together, 0.95).low == pytest.approx(2.0)
    assert math.isnan(log_ratio(np.array([1.0, -2.0]), np.array([1.0, 2.0])).value)  # no log of a negative mean


def test_an_interval_stops_where_the_values_do():
    iv = t_interval(contrast([np.array([0.0, 0.5, 1.0])], [1.0]), 0.95, bounds=(0.0, 1.0))
    assert (iv.low, iv.high) == (0.0, 1.0)  # Student's 0.5 -+ 4.30 x 0.29 would leave [0, 1]


def test_a_verdict_needs_the_whole_interval_on_one_side():
    assert side(Interval(2.2, 2.0, 2.4), ">", 1.0) == HELD and side(Interval(2.2, 2.0, 2.4), "<", 1.0) == NOT_HELD
    assert side(Interval(1.5, 0.5, 2.5), ">", 1.0) == INCONCLUSIVE
    at = Interval(1.0, 1.0, 2.0)
    assert side(at, ">=", 1.0) == HELD and side(at, ">", 1.0) == INCONCLUSIVE
    assert side(Interval(math.nan, math.nan, math.nan), ">", 0.0) == NOT_MEASURABLE
    assert side(Interval(1.0, math.nan, math.nan), ">", 0.0) == INCONCLUSIVE


def test_similar_is_two_one_sided_tests_on_the_signed_difference():
    assert within(Interval(0.1, -0.2, 0.3), 0.5) == HELD
    assert within(Interval(0.1, -0.6, 0.3), 0.5) == INCONCLUSIVE  # reaches past -0.5
    assert within(Interval(0.9, 0.6, 1.2), 0.5) == NOT_HELD and within(Interval(-0.9, -1.2, -0.5), 0.5) == NOT_HELD


def test_statements_combine():
    assert combine([HELD, HELD]) == HELD and combine([HELD, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([HELD, NOT_HELD]) == NOT_HELD and combine([HELD, NOT_MEASURABLE]) == INCONCLUSIVE
    assert combine([NOT_MEASURABLE]) == NOT_MEASURABLE and combine([]) == NOT_MEASURABLE


def test_rank_tests_are_scipys_exact_tests_and_state_the_smallest_p():
    d = np.array([1.0, 2.0, 3.0, -0.5, 4.0, 5.0])
    signed = rank_test(d, None, True, "greater", SETTINGS)
    assert signed.p == pytest.approx(sp.wilcoxon(d, alternative="greater", method="exact").pvalue)
    assert signed.p == pytest.approx(2 / 64)  # the one negative has the smallest rank: 2 sign patterns of 64
    assert signed.smallest == 1 / 64 and rank_verdict(signed, 0.025) == INCONCLUSIVE
    a, b = np.array([3.0, 4.0, 5.0, 6.0]), np.array([1.0, 2.0, 2.5, 7.0])
    rank_sum = rank_test(a, b, False, "greater", SETTINGS)
    assert rank_sum.p == pytest.approx(sp.mannwhitneyu(a, b, alternative="greater", method="exact").pvalue)
    assert rank_sum.smallest == 1 / 70
    # paired: the same as the signed-rank test of the differences; every pair apart: the smallest p, decided
    assert rank_test(d + 1.0, np.ones(6), True, "greater", SETTINGS).p == pytest.approx(signed.p)
    all_up = rank_test(np.arange(1.0, 7.0), np.zeros(6), True, "greater", SETTINGS)
    assert all_up.p == 1 / 64 and rank_verdict(all_up, 0.025) == HELD
    down = rank_test(np.arange(1.0, 7.0), np.zeros(6), True, "less", SETTINGS)
    assert down.p == 1.0 and down.p_other == 1 / 64 and rank_verdict(down, 0.025) == NOT_HELD
    # 3 against 3 cannot reach 2.5%: 1/20; 3 pairs 1/8
    assert smallest_p(3, 3) == 0.05 and smallest_p(3, None) == 0.125
    assert fewest_for_rank(True, 0.025) == 6 and fewest_for_rank(False, 0.025) == 4
    one = rank_test(np.array([2.0]), None, True, "greater", SETTINGS)  # a single seed: its sign, 1/2
    assert (one.p, one.p_other) == (0.5, 1.0)


def test_seeds_needed_is_the_count_at_80_percent_power():
    # effect = 1 sd: a one-sample (paired) t test at two-sided 5% needs 10 for 80% power (9.94 by the noncentral t)
    paired = Estimate(1.0, 1 / math.sqrt(5), 4, terms=(1.0,), paired=True)
    assert seeds_for_power(paired, 0.0, 0.95) == 10
    # two arms of sd 1, 1 apart: 17 per arm (16.7)
    welch = Estimate(1.0, math.sqrt(2 / 5), 8, terms=(1.0, 1.0))
    assert seeds_for_power(welch, 0.0, 0.95) == 17
    assert seeds_for_power(welch, 1.0, 0.95) == math.inf  # on the threshold: never
    assert seeds_for_power(Estimate(1.0, 0.0, 4, terms=(0.0,), paired=True), 0.0, 0.95) == 2  # no spread
    assert math.isnan(seeds_for_power(Estimate(1.0, math.nan, math.nan), 0.0, 0.95))  # one seed: no spread
    # on the log scale the gap is log(estimate / threshold)
    ratio = Estimate(math.log(3.0), 0.1, 4, log=True, terms=(0.05,), paired=True)
    assert seeds_for_power(ratio, 2.0, 0.95) == seeds_for_power(
        Estimate(math.log(3.0) - math.log(2.0), 0.1, 4, terms=(0.05,), paired=True), 0.0, 0.95)
    # the count decides about 80% of the time: simulated at that count, the interval clears 0 that often
    rng = np.random.default_rng(0)
    hits = [t_interval(contrast([rng.normal(1.0, 1.0, 10)], [1.0]), 0.95).low > 0 for _ in range(2000)]
    assert 0.76 < np.mean(hits) < 0.84


def test_clopper_pearson_by_hand_and_as_scipy_gives_it():
    # k = 0 and k = n have closed forms: (0, 1 - (alpha/2)^(1/n)) and ((alpha/2)^(1/n), 1)
    assert clopper_pearson(0, 3, 0.95) == pytest.approx((0.0, 1 - 0.025 ** (1 / 3)))
    assert clopper_pearson(3, 3, 0.95) == pytest.approx((0.025 ** (1 / 3), 1.0))
    ci = sp.binomtest(2, 9).proportion_ci(0.95, method="exact")
    assert clopper_pearson(2, 9, 0.95) == pytest.approx((ci.low, ci.high))
    assert clopper_pearson(0, 0, 0.95) == (0.0, 1.0)


def test_a_difference_of_rates_has_an_exact_interval():
    # 3 of 3 against 0 of 3: under equal rates p, P(3 and 0) = p^3 (1-p)^3 <= 1/64 < 2.5%: the interval clears 0
    all_none = rate_difference(3, 3, 0, 3, 0.95)
    assert all_none.estimate == 1.0 and 0 < all_none.low < 0.2 and all_none.high == pytest.approx(1.0)
    assert side(all_none, ">", 0.0) == HELD and rate_difference_clears_zero(3, 3, 0, 3, 0.95)
    assert smallest_rate_p(3, 3) == pytest.approx(1 / 64)
    two = rate_difference(2, 3, 0, 3, 0.95)  # does not: the worst common rate leaves more than 2.5% at or beyond
    assert two.low < 0 < two.high and not rate_difference_clears_zero(2, 3, 0, 3, 0.95)
    flipped = rate_difference(0, 3, 2, 3, 0.95)
    assert (flipped.low, flipped.high) == pytest.approx((-two.high, -two.low))
    assert math.isnan(rate_difference(1, 0, 0, 3, 0.95).estimate)
    # at equal seed counts the test depends on k1 - k2 alone: the fast path agrees with the test at every count
    for m in range(2, 9):
        first = _clears_from(m, 0.95)
        for k1 in range(m + 1):
            for k2 in range(k1 + 1):
                assert rate_difference_clears_zero(k1, m, k2, m, 0.95) == (k1 - k2 >= first), (m, k1, k2)


def test_seeds_needed_for_rates_sums_the_binomial_outcomes():
    # a rate of 1 against 1/2: certain outcomes, so the fewest m with (alpha/2)^(1/m) > 1/2: 6 (5 gives 0.478)
    assert rate_seeds_for_power(3, 3, 0.5, 0.95) == 6
    assert rate_seeds_for_power(1, 2, 0.5, 0.95) == math.inf and math.isnan(rate_seeds_for_power(0, 0, 0.5, 0.95))
    # 1 against 0: certain too, the fewest m where m of m against 0 of m clears 0 (3)
    assert rate_difference_seeds_for_power(3, 3, 0, 3, 0.95) == 3
    m = int(rate_difference_seeds_for_power(9, 9, 2, 9, 0.95))  # 1 against 2/9: by enumeration at m and m - 1
    from scipy.stats import binom

    def chance(m: int) -> float:
        return sum(binom.pmf(k2, m, 2 / 9) for k2 in range(m + 1) if rate_difference_clears_zero(m, m, k2, m, 0.95))

    assert chance(m) >= 0.8 > chance(m - 1)
    assert rate_difference_seeds_for_power(1, 3, 1, 3, 0.95) == math.inf
