"""Which RL runs of two outputs folders repeat each other exactly: two repros of one commit, say.

    python -m tools.compare_runs outputs/default <other outputs folder>

Every run folder both have (<outputs>/runs/<group>/<run>/seed*/history.csv) is compared iteration by iteration on
every logged column but the timings (timing/*), as the files spell the numbers: a run repeats only if every value is
the same to the last digit. A run that one folder has not finished (fewer iterations) is compared over the
iterations both have. Prints one line per group (runs compared, how many repeat) and, for each run that does not,
the first iteration and column where the two part and by how much. Exits 0 either way: it reports, it does not judge.

    python -m tools.compare_runs outputs/default <other outputs folder> --finals [--last-n N]

also compares what the runs end at, for two runs that do not repeat (another GPU's rounding, another commit): per run
and agent, the seeds' mean final task reward and KL (each seed's mean over its last `--last-n` iterations, by default
the params' report.last_n, as the report's finals) in each folder, their difference and Welch's t (the difference over
its standard error from the two folders' seed variances), and the largest |t| of all. Two draws of the same experiment
give |t| mostly below 2, but at 3 seeds t has as few as 2 degrees of freedom and heavy tails: two repros of one commit
on one kind of GPU, whose math runs part on the GPU's rounding, had one |t| of 7.7 among 56. A repro's seeds share its
base models and reward model, so where those were trained anew (on another GPU) the standard error leaves their
variation out, and a run on a base model that came out differently shows as a large |t| across all its seeds.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import statistics
from pathlib import Path

from tools.score_runs import check_outputs

TIMING = "timing/"


@functools.cache  # --finals reads each history again: once from disk
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


QUANTITIES = (("task_reward", "task reward"), ("kl", "KL"))


def final_values(outputs: Path, last_n: int) -> dict[tuple[str, str, str], list[float]]:
    """{(group/run, agent, quantity): each seed's final value, as the report computes it (`final_value`: the mean of
    the last `last_n` logged iterations)}."""
    from cory.report.curves import final_value

    finals: dict[tuple[str, str, str], list[float]] = {}
    for path in sorted((outputs / "runs").glob("*/*/seed*/history.csv")):
        rows = history(path)
        run = str(path.parent.parent.relative_to(outputs / "runs"))
        for agent in ("llm1", "llm2"):
            for column, _ in QUANTITIES:
                values = [float(row[f"{agent}/{column}"]) for row in rows if row.get(f"{agent}/{column}")]
                if values:
                    finals.setdefault((run, agent, column), []).append(final_value(values, last_n))
    return finals


def welch_t(a: list[float], b: list[float]) -> float:
    """(mean of a - mean of b) over its standard error from the two samples' variances; nan under 2 values a side."""
    if len(a) < 2 or len(b) < 2:
        return math.nan
    error = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    difference = statistics.fmean(a) - statistics.fmean(b)
    return difference / error if error > 0 else (0.0 if difference == 0 else math.copysign(math.inf, difference))


def compare_finals(first: Path, second: Path, last_n: int) -> list[str]:
    """The --finals lines: per run and agent both folders have, the seeds' mean final task reward and KL in each, the
    difference and Welch's t; then the largest |t|."""
    ours, theirs = final_values(first, last_n), final_values(second, last_n)
    lines = [f"final values (means of the last {last_n} iterations, over seeds): this / the other, difference, "
             "Welch's t"]
    ts: list[tuple[float, str]] = []
    for run, agent in sorted({(run, agent) for run, agent, _ in ours if (run, agent, "kl") in theirs}):
        cells = []
        for column, name in QUANTITIES:
            a, b = ours.get((run, agent, column)), theirs.get((run, agent, column))
            if not a or not b:
                continue
            t, mean_a, mean_b = welch_t(a, b), statistics.fmean(a), statistics.fmean(b)
            cells.append(f"{name} {mean_a:.3g} / {mean_b:.3g}, {mean_a - mean_b:+.3g}, t {t:+.2f}")
            if not math.isnan(t):
                ts.append((t, f"{run} {agent} {name}"))
        seeds = f"{len(ours[(run, agent, 'kl')])} / {len(theirs[(run, agent, 'kl')])} seeds"
        lines.append(f"  {run} {agent} ({seeds}): " + "; ".join(cells))
    if ts:
        t, where = max(ts, key=lambda item: abs(item[0]))
        lines.append(f"largest |t|: {abs(t):.2f} ({where}) of {len(ts)}; |t| > 2 in {sum(abs(x) > 2 for x, _ in ts)}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", type=Path, help="a profile's outputs folder, e.g. outputs/default")
    parser.add_argument("second", type=Path, help="the other run's outputs folder")
    parser.add_argument("--finals", action="store_true", help="also compare the runs' final values (see above)")
    parser.add_argument("--last-n", type=int, help="iterations a final value averages (default: the params' "
                                                   "report.last_n, as the report)")
    args = parser.parse_args(argv)
    check_outputs([args.first, args.second], "compare_runs")
    print("\n".join(compare(args.first, args.second)))
    if args.finals:
        if args.last_n is None:
            from pipeline.params import load_params

            args.last_n = load_params().report.last_n  # params.yaml, or $CORY_PARAMS
        print("\n".join(compare_finals(args.first, args.second, args.last_n)))


if __name__ == "__main__":
    main()
