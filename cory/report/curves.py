"""Statistics of one seed's curve (a 1-D array over iterations): final and start values, slopes, drawdowns, peaks,
the fall that batch noise alone reaches, and gaps between curves. Pure numpy/pandas."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd



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
