"""Which RL runs of two outputs folders repeat each other exactly: two repros of one commit, say.

    python -m tools.compare_runs outputs/default <other outputs folder>

Every run folder both have (<outputs>/runs/<group>/<run>/seed*/history.csv) is compared iteration by iteration on
every logged column but the timings (timing/*), as the files spell the numbers: a run repeats only if every value is
the same to the last digit. A run that one folder has not finished (fewer iterations) is compared over the
iterations both have. Prints one line per group (runs compared, how many repeat) and, for each run that does not,
the first iteration and column where the two part and by how much. Exits 0 either way: it reports, it does not judge.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from tools.score_runs import check_outputs

TIMING = "timing/"


def history(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def first_difference(a: list[dict[str, str]], b: list[dict[str, str]]) -> tuple[int, str, str, str] | None:
    """(row, column, value in a, value in b) of the first logged value two histories disagree on, over the rows both
    have (timings left out); None where they agree."""
    for row, (x, y) in enumerate(zip(a, b)):
        for column in x:
            if not column.startswith(TIMING) and x[column] != y.get(column):
                return row, column, x[column], str(y.get(column))
    return None


def compare(first: Path, second: Path) -> list[str]:
    """The report's lines: per group, then per run that does not repeat."""
    lines = []
    runs = sorted(p.relative_to(first / "runs").parent for p in (first / "runs").glob("*/*/seed*/history.csv"))
    groups: dict[str, list[tuple[Path, tuple | None, int, int]]] = {}
    for run in runs:
        other = second / "runs" / run / "history.csv"
        if not other.is_file():
            continue
        a, b = history(first / "runs" / run / "history.csv"), history(other)
        groups.setdefault(run.parts[0], []).append((run, first_difference(a, b), min(len(a), len(b)),
                                                    max(len(a), len(b))))
    for group, compared in groups.items():
        same = sum(diff is None for _, diff, _, _ in compared)
        partial = [f"{rows} of {longest}" for _, diff, rows, longest in compared if diff is None and rows < longest]
        lines.append(f"{group}: {same} of {len(compared)} runs repeat exactly"
                     + (f" ({len(partial)} of them over the iterations an unfinished one has: {', '.join(partial)})"
                        if partial else ""))
        for run, diff, rows, _ in compared:
            if diff is not None:
                row, column, x, y = diff
                lines.append(f"  {run}: parts at row {row} of {rows}, {column}: {x} vs {y}")
    if not groups:
        lines.append(f"no run folder is in both {first}/runs and {second}/runs")
    return lines


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    first, second = map(Path, argv)
    check_outputs([first, second], "compare_runs")
    print("\n".join(compare(first, second)))


if __name__ == "__main__":
    main(sys.argv[1:])
