"""The report's numbers and tables as markdown: a mean with its seed range to the digits its spread supports, fixed
decimals, table cells and tables."""

from __future__ import annotations

import math

import numpy as np


def _num(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,}" if isinstance(x, int) else f"{x:.4g}"


def _cell(text) -> str:
    """Text safe in one markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", "⏎ ").strip() or " "


def _place(x: float, significant: int) -> int:
    """Decimal place of x's `significant`-th significant digit (negative: left of the point; x != 0)."""
    return significant - 1 - math.floor(math.log10(abs(x)))


def decimals(mean: float, std: float) -> int:
    """Decimal places of a mean ± std: the std's 2nd significant digit, but no finer than the mean's 4th (a std of
    float noise, 1.8e-06 on 3.284, reads "3.284 ± 0.000"); none for equal whole numbers (an iteration, a count)."""
    if std == 0 and float(mean).is_integer():
        return 0
    places = ([_place(std, 2)] if std > 0 else []) + ([_place(mean, 4)] if mean != 0 else [])
    return min(places) if places else 0


def fixed(x: float, places: int) -> str:
    """x rounded to `places` decimals (to tens, hundreds... if negative); n/a for NaN; never "-0.00"."""
    if math.isnan(x):
        return "n/a"
    return f"{round(x, places) + 0.0:.{max(places, 0)}f}"


def mean_std(values: list[float]) -> tuple[str, int]:
    """("mean ± std (n seeds)", its decimal places) over the finite values: ("n/a", 0) without any; a single value
    to 4 significant digits."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "n/a", 0
    mean, std = float(np.mean(values)), float(np.std(values))
    places = decimals(mean, std)
    if len(values) == 1:
        return f"{fixed(mean, places)} (1 seed)", places
    return f"{fixed(mean, places)} ± {fixed(std, places)} ({len(values)} seeds)", places


def table(header: list[str], rows: list[list]) -> list[str]:
    """The lines of a markdown table: the header, its rule, and each row's cells made safe (`_cell`). The one table
    builder of the report, METRICS.md and the MLflow parent run's description."""
    rows = [f"| {' | '.join(_cell(c) for c in row)} |" for row in rows]
    return [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}", *rows]


def _seed_list(seeds: list) -> str:
    return ", ".join(map(str, seeds))
