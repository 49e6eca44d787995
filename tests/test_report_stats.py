"""The verdicts' statistics (cory.report.stats) against cases computed by hand: bootstrap intervals over seeds, the
side of a threshold, the combination of sub-conditions, exact rate intervals and the seed-count estimates."""

import math

import numpy as np
import pytest

from cory.report.stats import (
    HELD,
    INCONCLUSIVE,
    NOT_HELD,
    NOT_MEASURABLE,
    Bootstrap,
    Interval,
    bootstrap_interval,
    clopper_pearson,
    combine,
    expanded_alpha,
    rate_difference,
    rate_difference_clears_zero,
    seeds_needed,
    seeds_needed_for_rates,
    side,
    student_half_width,
    t_quantile,
)

SETTINGS = Bootstrap(confidence=0.95, draws=10000, seed=0)


def column(*values) -> np.ndarray:
    """One run's seeds of one quantity, as the (seeds, quantities) array bootstrap_interval takes."""
    return np.array(values, dtype=float)[:, None]


def mean(x):
    return x


def test_the_interval_of_a_mean_of_a_few_seeds_is_students_t():
    # 1, 2, 6: mean 3, sample std sqrt(7); t_{0.975, 2} = 4.3027, so 3 -+ 4.3027 sqrt(7) / sqrt(3) = 3 -+ 6.573, far
    # beyond the draws' range [1, 6] (the bootstrap's standard error is a random estimate: a few per mille off)
    iv = bootstrap_interval([column(1.0, 2.0, 6.0)], mean, SETTINGS)
    assert iv.estimate == 3.0 and iv.high - iv.estimate == pytest.approx(6.573, rel=0.03)
    assert iv.high - iv.estimate == pytest.approx(iv.estimate - iv.low)
    assert student_half_width(iv.se, 3, 0.95) == pytest.approx(iv.high - iv.estimate)
    # two seeds: t_{0.975, 1} = 12.706, sample std sqrt(2): 2 -+ 12.706
    iv = bootstrap_interval([column(1.0, 3.0)], mean, SETTINGS)
    assert iv.estimate == 2.0 and (iv.high - 2.0, 2.0 - iv.low) == pytest.approx((12.706, 12.706), rel=0.03)
    # where the expanded percentiles are the wider, they stay: at 40% and 2 seeds t_{0.7, 1} = 0.727 leaves [1.27, 2.73],
    # while the expanded level, 2 Phi(-sqrt(2) t_{0.7, 1}) = 0.30, puts its 0.15 and 0.85 quantiles on the seeds
    wide = bootstrap_interval([column(1.0, 3.0)], mean, Bootstrap(0.4, 10000, 0))
    assert (wide.low, wide.high) == (1.0, 3.0)


def test_the_interval_ends_where_the_effects_values_do():
    # shares of 0, 0.5 and 1: Student's 0.5 -+ 4.3027 x 0.5 / sqrt(3) = 0.5 -+ 1.24 would reach below 0 and above 1
    share = bootstrap_interval([column(0.0, 0.5, 1.0)], mean, SETTINGS, bounds=(0.0, 1.0))
    free = bootstrap_interval([column(0.0, 0.5, 1.0)], mean, SETTINGS)
    assert free.low < 0.0 and free.high > 1.0 and (share.low, share.high) == (0.0, 1.0)
    assert side(share, ">=", 1.0) == INCONCLUSIVE and side(share, ">", 0.0) == INCONCLUSIVE


def test_a_mean_of_three_seeds_is_covered_as_often_as_the_confidence_says():
    # the draws of 3 seeds end at their extremes, whose range holds the mean of a symmetric distribution only
    # 1 - 2 (1/2)^3 = 75% of the time; the interval, never narrower than Student's t, holds it about 95% of the time
    rng = np.random.default_rng(1)
    settings = Bootstrap(0.95, 2000, 0)
    covered = [(lambda iv: iv.low <= 0.0 <= iv.high)(bootstrap_interval([column(*rng.normal(size=3))], mean, settings))
               for _ in range(400)]
    assert np.mean(covered) >= 0.9


def test_the_expanded_level_by_hand():
    # Student's t quantiles of a table, and Hesterberg's alpha' = 2 Phi(-sqrt(n / (n-1)) t_{0.975, n-1})
    for df, t in [(1, 12.7062), (2, 4.3027), (3, 3.1824), (7, 2.3646), (30, 2.0423)]:
        assert t_quantile(0.975, df) == pytest.approx(t, abs=1e-4)
    assert expanded_alpha(0.95, 4) == pytest.approx(2 * 0.5 * math.erfc(math.sqrt(4 / 3) * 3.18245 / math.sqrt(2)),
                                                    rel=1e-4)
    assert expanded_alpha(0.95, 8) == pytest.approx(0.01148, abs=1e-4)
    assert 0.045 < expanded_alpha(0.95, 100) < 0.05  # towards the plain level as seeds grow


def test_two_runs_of_three_seeds_are_decided_only_where_welchs_t_clears():
    # the plain percentile interval of a difference of two 3-seed means excludes 0 here (the draws where every
    # pick is the overlapping pair, 1/729, lie beyond its 2.5%): the expanded one reaches min(a) - max(b) = -0.1
    a, b = column(1.0, 2.0, 3.0), column(0.0, 0.5, 1.1)
    overlap = bootstrap_interval([a, b], lambda x, y: x - y, SETTINGS)
    assert overlap.low < 1.0 - 1.1 and overlap.high > 3.0 - 0.0
    assert side(overlap, ">", 0.0) == INCONCLUSIVE
    # every seed of a beyond every seed of b, but 2 -+ 4.3027 sqrt(1/3 + 0.2033/3) = 2 -+ 2.72 still contains 0
    spread = bootstrap_interval([a, column(0.0, 0.5, 0.9)], lambda x, y: x - y, SETTINGS)
    assert spread.estimate - spread.low == pytest.approx(2.724, rel=0.03) and side(spread, ">", 0.0) == INCONCLUSIVE
    # apart by far more than their spread: 2.9 -+ 4.3027 sqrt(0.01/3 + 0.01/3) = 2.9 -+ 0.35
    apart = bootstrap_interval([column(2.9, 3.0, 3.1), column(0.0, 0.1, 0.2)], lambda x, y: x - y, SETTINGS)
    assert apart.estimate - apart.low == pytest.approx(0.351, rel=0.03) and side(apart, ">", 0.0) == HELD


def test_a_verdict_needs_the_whole_interval_on_one_side():
    clear = bootstrap_interval([column(2.0, 2.2, 2.4)], mean, SETTINGS)
    straddles = bootstrap_interval([column(0.5, 1.5, 2.5)], mean, SETTINGS)
    below = bootstrap_interval([column(0.1, 0.2, 0.3)], mean, SETTINGS)
    assert side(clear, ">", 1.0) == HELD and side(clear, "<", 1.0) == NOT_HELD
    assert straddles.estimate == 1.5 and side(straddles, ">", 1.0) == INCONCLUSIVE
    assert side(below, ">", 1.0) == NOT_HELD and side(below, "<=", 1.0) == HELD


def test_a_threshold_on_the_intervals_end_counts_by_the_rules_sign():
    at = Interval(1.0, 1.0, 2.0)
    assert side(at, ">=", 1.0) == HELD and side(at, ">", 1.0) == INCONCLUSIVE
    assert side(at, "<", 1.0) == NOT_HELD and side(at, "<=", 1.0) == INCONCLUSIVE
    assert side(Interval(0.5, 0.0, 1.0), "<=", 1.0) == HELD and side(Interval(0.5, 0.0, 1.0), "<", 1.0) == INCONCLUSIVE
    assert side(Interval(2.0, 1.0, 3.0), "<", 1.0) == NOT_HELD  # every point >= 1
    assert side(Interval(0.0, -1.0, 1.0), ">", 1.0) == NOT_HELD  # every point <= 1


def test_runs_are_resampled_independently_and_a_runs_quantities_together():
    # two runs whose seeds 0 and 1 read 0 and 10 each: paired by seed their difference would always be 0
    a, b = column(0.0, 10.0), column(0.0, 10.0)
    apart = bootstrap_interval([a, b], lambda x, y: x - y, SETTINGS)
    assert apart.estimate == 0.0 and apart.low < -10.0 and apart.high > 10.0
    # one run with two quantities equal seed by seed: drawn together, their difference is 0 in every draw
    together = bootstrap_interval([np.hstack([a, b])], lambda x, y: x - y, SETTINGS)
    assert (together.low, together.high) == (0.0, 0.0)
    # a constant (a model trained once) joins every draw as it is
    shifted = bootstrap_interval([column(1.0, 3.0)], lambda x, c: x - c, SETTINGS, constants=(1.0,))
    unshifted = bootstrap_interval([column(1.0, 3.0)], mean, SETTINGS)
    assert (shifted.estimate, shifted.low, shifted.high) == pytest.approx((1.0, unshifted.low - 1, unshifted.high - 1))


def test_the_bootstrap_is_reproducible():
    values = [column(0.3, 1.7, 2.2, 0.9, 1.1), column(1.0, 0.4, 0.8)]
    first = bootstrap_interval(values, lambda x, y: x / y, SETTINGS)
    assert first == bootstrap_interval(values, lambda x, y: x / y, SETTINGS)
    assert first.low < first.estimate < first.high and first.se > 0


def test_one_seed_gives_no_interval_and_nan_gives_no_verdict():
    one = bootstrap_interval([column(5.0)], mean, SETTINGS)
    assert one.estimate == 5.0 and math.isnan(one.low) and side(one, ">", 1.0) == INCONCLUSIVE
    # a draw without a value (0/0: both runs' seeds drawn as 0) leaves no interval
    undefined = bootstrap_interval([column(0.0, 1.0), column(0.0, 1.0)], lambda x, y: x / y, SETTINGS)
    assert undefined.estimate == 1.0 and math.isnan(undefined.high) and side(undefined, ">", 0.5) == INCONCLUSIVE
    assert side(Interval(math.nan, math.nan, math.nan), ">", 0.0) == NOT_MEASURABLE
    # an infinite draw is a value (a ratio to a run whose mean is 0): it sits at the top of the interval
    infinite = bootstrap_interval([column(1.0, 2.0), column(0.0, 0.0, 1.0)], lambda x, y: x / y, SETTINGS)
    assert infinite.high == math.inf and side(infinite, ">", 0.5) == HELD and math.isinf(infinite.se)


def test_sub_conditions_combine():
    assert combine([HELD, HELD]) == HELD
    assert combine([HELD, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([HELD, NOT_HELD]) == NOT_HELD and combine([INCONCLUSIVE, NOT_HELD]) == NOT_HELD
    assert combine([HELD, NOT_MEASURABLE]) == INCONCLUSIVE
    assert combine([NOT_MEASURABLE, NOT_MEASURABLE]) == NOT_MEASURABLE and combine([]) == NOT_MEASURABLE


def test_clopper_pearson_by_hand():
    # k = 0 and k = n have closed forms: (0, 1 - (alpha/2)^(1/n)) and ((alpha/2)^(1/n), 1)
    assert clopper_pearson(0, 3, 0.95) == pytest.approx((0.0, 1 - 0.025 ** (1 / 3)))
    assert clopper_pearson(3, 3, 0.95) == pytest.approx((0.025 ** (1 / 3), 1.0))
    assert clopper_pearson(1, 3, 0.95) == pytest.approx((0.0084038, 0.9057007), abs=1e-6)  # tables
    assert clopper_pearson(0, 0, 0.95) == (0.0, 1.0)


def test_a_difference_of_rates_has_an_exact_interval():
    # 3 of 3 against 0 of 3: under equal rates p, P(3 and 0) = p^3 (1-p)^3 <= 1/64 < 2.5%: the interval clears 0
    all_none = rate_difference(3, 3, 0, 3, 0.95)
    assert all_none.estimate == 1.0 and 0 < all_none.low < 0.2 and all_none.high == pytest.approx(1.0)
    assert side(all_none, ">", 0.0) == HELD and rate_difference_clears_zero(3, 3, 0, 3, 0.95)
    # 2 of 3 against 0 of 3 does not (the worst common rate leaves more than 2.5% at or beyond 2/3)
    two = rate_difference(2, 3, 0, 3, 0.95)
    assert two.low < 0 < two.high and side(two, ">", 0.0) == INCONCLUSIVE
    assert not rate_difference_clears_zero(2, 3, 0, 3, 0.95)
    # the interval turns with the runs, and counts failures as well as successes
    flipped = rate_difference(0, 3, 2, 3, 0.95)
    assert (flipped.low, flipped.high) == pytest.approx((-two.high, -two.low))
    assert (rate_difference(3, 3, 1, 3, 0.95).low, rate_difference(3, 3, 1, 3, 0.95).high) == \
        pytest.approx((two.low, two.high))
    assert math.isnan(rate_difference(1, 0, 0, 3, 0.95).estimate)


def test_seeds_needed_by_hand():
    # gap 1, se 0.5 over 3 seeds: se' = 0.5 sqrt(3/2) = 0.612; the expanded interval at m seeds reaches about
    # t_{m-1} x 0.612 x sqrt(3/m): at 6 seeds 2.571 x 0.612 x 0.707 = 1.11, at 7 2.447 x 0.612 x 0.655 = 0.98 < 1
    # (the normal quantile alone would say 3 (1.96 x 0.612)^2 = 4.32 -> 5)
    assert seeds_needed(Interval(3.0, 2.0, 4.0, 0.5), 2.0, 3, 0.95) == 7
    assert seeds_needed(Interval(3.0, 2.9, 3.1, 0.01), 2.0, 3, 0.95) == 2  # decided with room: the fewest, 2
    assert seeds_needed(Interval(2.0, 1.0, 3.0, 0.5), 2.0, 3, 0.95) == math.inf  # on the threshold: never
    assert seeds_needed(Interval(1.0, 1.0, 1.0, 0.0), 1.0, 3, 0.95) == 2  # no spread at all
    assert math.isnan(seeds_needed(Interval(3.0, math.nan, math.nan), 2.0, 1, 0.95))  # one seed: no spread known
    # rates: the first seed count at which the observed rates would clear 0
    assert seeds_needed_for_rates(3, 3, 0, 3, 0.95) == 3
    m = int(seeds_needed_for_rates(2, 3, 0, 3, 0.95))
    assert rate_difference_clears_zero(round(2 / 3 * m), m, 0, m, 0.95)
    assert not rate_difference_clears_zero(round(2 / 3 * (m - 1)), m - 1, 0, m - 1, 0.95)
    assert seeds_needed_for_rates(1, 3, 1, 3, 0.95) == math.inf
