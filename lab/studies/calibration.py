"""The IMDB calibration runs: single-agent PPO (and CORY beside it) at candidate settings, on the profile's base models.

    python -m lab.studies.calibration write [--smollm2 FOLDER] > /tmp/calibration.yaml
    CORY_PARAMS=/tmp/calibration.yaml python -m pipeline.train cal_full cal_k1 cal_smollm2
    python -m lab.studies.calibration summary            # final task reward / KL / combined reward of every run

The paper's IMDB result lives where single-agent PPO collapses (KL in the tens by iteration 100, combined reward far
below its start) while its task reward saturates. These groups try the candidate settings on Table 1's batch of 256
for 100 iterations: the paper's full-vocabulary KL in the reward against the per-token k1 estimator, and the learning
rate, each for PPO and CORY with the same settings.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import sys
from pathlib import Path

import yaml

TABLE1 = {"ppo": {"batch_size": 256, "mini_batch_size": 256}, "iterations": 100}
PPO = {"cory": {"n_agents": 1}}


def _runs(**variants: dict) -> dict:
    """name -> {train: settings}: each variant as a PPO run and a CORY run."""
    out = {}
    for name, settings in variants.items():
        out[f"ppo_{name}"] = {"train": {**copy.deepcopy(settings), **PPO}}
        out[f"cory_{name}"] = {"train": copy.deepcopy(settings)}
    return out


def groups(smollm2: str | None) -> dict:
    full = {"ppo": {"kl_penalty": "full"}}
    scratch = {
        "cal_full": {"task": "imdb", "seeds": [0, 1, 2, 3], "save_models": False, "train": TABLE1,
                     "runs": _runs(full=full)},
        "cal_k1": {"task": "imdb", "seeds": [0, 1], "save_models": False, "train": TABLE1,
                   "runs": _runs(lr4x={"ppo": {"learning_rate": 5.64e-5}},
                                 eta003={"ppo": {"init_kl_coef": 0.03}})},
    }
    if smollm2:
        runs = _runs(full=full, full_lr5e5={"ppo": {"kl_penalty": "full", "learning_rate": 5e-5}},
                     lr1e4_eta003={"ppo": {"learning_rate": 1e-4, "init_kl_coef": 0.03}})
        for run in runs.values():
            run["model"] = smollm2
        scratch["cal_smollm2"] = {"task": "imdb", "seeds": [0, 1], "save_models": False, "train": TABLE1, "runs": runs}
    return scratch


def write(smollm2: str | None) -> dict:
    from lab.params_file import written_params

    params = written_params()  # checked valid before it is changed
    params["experiments"].update(groups(smollm2))  # the profile's own groups stay, for validation; train these alone
    params["seeds"] = sorted(set(params["seeds"]) | {0, 1, 2, 3})
    return params


def summary(root: Path, last: int = 10) -> None:
    print(f"{'run':40s} {'task':>7s} {'kl':>7s} {'comb':>7s} {'task0':>7s} {'comb0':>7s}  (means of the last {last})")
    for run in sorted(root.glob("cal_*/*/seed*")):
        path = run / "history.csv"
        if not path.is_file():
            continue
        rows = list(csv.DictReader(open(path)))
        if not rows:
            continue

        def mean(key: str, part: list[dict]) -> float:
            values = [float(r[key]) for r in part if r.get(key) not in (None, "")]
            return sum(values) / len(values) if values else float("nan")

        end = rows[-last:]
        name = f"{run.parent.parent.name}/{run.parent.name}/{run.name} ({len(rows)} it.)"
        print(f"{name:40s} {mean('llm1/task_reward', end):7.2f} {mean('llm1/kl', end):7.1f} "
              f"{mean('llm1/combined_reward', end):7.2f} {mean('llm1/task_reward', rows[:1]):7.2f} "
              f"{mean('llm1/combined_reward', rows[:1]):7.2f}")
        samples = run / "samples.jsonl"
        if samples.is_file():
            lines = samples.read_text().splitlines()
            if lines:
                s = json.loads(lines[-1])
                print(f"    {s.get('query', '')!r} -> {s.get('pioneer_response', '')!r}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("--smollm2", help="folder of the converted SmolLM2-135M model")
    s = sub.add_parser("summary")
    s.add_argument("root", nargs="?")
    args = parser.parse_args(argv)
    if args.command == "write":
        yaml.safe_dump(write(args.smollm2), sys.stdout, sort_keys=False)
    else:
        from pipeline.params import load_params
        from pipeline.paths import out_dir

        summary(Path(args.root) if args.root else out_dir(load_params(), "runs"))


if __name__ == "__main__":
    from pipeline.common import run_stage

    run_stage(lambda: main(sys.argv[1:]))
