"""Benchmark: the base models trained one after another (one stage each) against all at once on the GPU(s).

    python -m lab.bench.base_models [--only concurrent|sequential]     (from the project root)

Runs the profile's data stages if their outputs are missing, then `python -m pipeline.base_models NAME` for every
base model one after another (as the three stages of before ran), then `python -m pipeline.base_models`, the stage
that trains them all at once (under its CUDA MPS daemon with runtime.mps), and prints each model's seconds and peak GPU memory (its metrics/base_models file) and the wall time
of each way, side by side in this one run. It writes what the stages write (outputs/<profile>/models, metrics).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from pipeline.params import load_params
from pipeline.paths import out_dir


def run_models(params: dict, names: list[str], at_once: bool) -> float:
    """Wall seconds to train `names`, one stage process after another or all in one stage process at once. Their
    metrics files go first, so that the stage trains them instead of keeping them (pipeline.base_models.is_current)."""
    for name in names:
        out_dir(params, "metrics", "base_models", f"{name}.json").unlink(missing_ok=True)
    started = time.perf_counter()
    command = [sys.executable, "-m", "pipeline.base_models"]
    runs = [command] if at_once else [[*command, name] for name in names]
    codes = [subprocess.run(run, stdout=subprocess.DEVNULL, check=False).returncode for run in runs]
    if any(codes):
        sys.exit(f"a base-model stage process failed: exit codes {codes}")
    return time.perf_counter() - started


def report(params: dict, names: list[str], label: str, wall: float) -> None:
    print(f"== {label}: {wall:.1f} s wall", flush=True)
    for name in names:
        metrics = json.loads(out_dir(params, "metrics", "base_models", f"{name}.json").read_text())
        print(f"  {name}: {metrics['total_seconds']:.1f} s in all, training {metrics['train_seconds']:.1f} s, "
              f"{metrics['tokens_per_second'] / 1e6:.2f} M tokens/s, peak GPU {metrics.get('peak_gpu_gib')} GiB, "
              f"val perplexity {metrics['val_perplexity']:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["concurrent", "sequential"])
    args = parser.parse_args()
    params = load_params()
    names = list(params.base_models)
    for stage, folder in (("prepare_imdb", "imdb"), ("prepare_math", "math")):
        if not out_dir(params, "data", folder).exists():
            subprocess.run([sys.executable, "-m", f"pipeline.{stage}"], check=True, stdout=subprocess.DEVNULL)
    walls = {}
    if args.only != "concurrent":
        walls["one after another"] = run_models(params, names, at_once=False)
        report(params, names, "one after another", walls["one after another"])
    if args.only != "sequential":
        walls["all at once"] = run_models(params, names, at_once=True)
        report(params, names, "all at once (the base_models stage)", walls["all at once"])
    if len(walls) == 2:
        print(f"== one after another / all at once: {walls['one after another'] / walls['all at once']:.2f}x")


if __name__ == "__main__":
    main()
