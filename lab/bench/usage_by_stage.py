"""Where a `dvc repro` left the machine idle: lab/offline-gpu/usage_sampler.sh's once-a-second readings, stage by stage.

    python -m lab.bench.usage_by_stage USAGE_CSV [TIMING_DIR] [--every SECONDS]

USAGE_CSV comes back with a device run's results (`bash lab/offline-gpu/device_repro.sh collect`: usage.csv in
repro-results.tgz); TIMING_DIR holds the stages' timing files of the same run (default
outputs/default/metrics/timing, which the same archive unpacks). Prints, for each stage and for the time before it
(DVC, the stage process's start), the mean GPU utilization (nvidia-smi's: the share of each second in which a kernel
ran, not how full the GPU was), the peak GPU memory and the mean and peak share of the host's cores that were busy;
with --every, the same in windows of that many seconds since the sampler's start.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path


def read_usage(path: Path) -> list[dict[str, float]]:
    """The sampler's rows that have a GPU reading, as numbers."""
    rows = []
    for row in csv.DictReader(path.open()):
        if row.get("gpu_util"):
            rows.append({key: float(row[key]) for key in ("time", "gpu_util", "gpu_mem_mib", "cpu_busy", "cores")})
    if not rows:
        raise SystemExit(f"{path}: no readings with a GPU (was it sampled on a machine without nvidia-smi?)")
    return rows


def read_stages(folder: Path) -> list[tuple[str, float, float]]:
    """(stage, started_at, finished_at) of every timing file in `folder`, in the order they ran."""
    stages = []
    for path in folder.glob("*.json"):
        record = json.loads(path.read_text())
        if "started_at" in record:  # files of older runs recorded seconds only
            stages.append((record["stage"], record["started_at"], record["finished_at"]))
    if not stages:
        raise SystemExit(f"{folder}: no stage timing files")
    return sorted(stages, key=lambda stage: stage[1])


def summary(rows: list[dict[str, float]], start: float, end: float) -> str:
    window = [row for row in rows if start <= row["time"] < end]
    if not window:
        return "no readings"
    mean = lambda key: sum(row[key] for row in window) / len(window)  # noqa: E731
    return (f"GPU {mean('gpu_util'):5.1f}% busy, {max(r['gpu_mem_mib'] for r in window) / 1024:5.1f} GiB at most; "
            f"cores {mean('cpu_busy'):5.1f}% busy (at most {max(r['cpu_busy'] for r in window):.0f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("usage", type=Path)
    parser.add_argument("timing", type=Path, nargs="?", default=Path("outputs/default/metrics/timing"))
    parser.add_argument("--every", type=float, help="also print windows of this many seconds")
    args = parser.parse_args()
    rows = read_usage(args.usage)
    origin, last = rows[0]["time"], rows[-1]["time"]
    previous = origin
    for stage, started, finished in read_stages(args.timing):
        if started > last or finished < origin:  # e.g. a report stage rerun elsewhere on the run's files
            print(f"{stage:>22}  not sampled (ran outside the sampler's {origin:.0f}-{last:.0f})")
            continue
        print(f"{'before ' + stage:>22} {started - previous:6.0f} s  {summary(rows, previous, started)}")
        print(f"{stage:>22} {finished - started:6.0f} s  {summary(rows, started, finished)}")
        previous = finished
    print(f"{'after the last stage':>22} {last - previous:6.0f} s  {summary(rows, previous, last + 1)}")
    if args.every:
        t = origin
        while t <= last:
            print(f"{t - origin:6.0f}-{t - origin + args.every:<6.0f} {summary(rows, t, t + args.every)}")
            t += args.every


if __name__ == "__main__":
    main()
