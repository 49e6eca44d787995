"""The report's claims on a folder of finished RL runs, without the evaluate stage: for a run that did not get as far as
a report (a train stage stopped early), or runs copied from elsewhere.

    python -m tools.score_runs outputs/default [--groups imdb pareto math pareto_math] [--last-n 10]
        [--claims-json reports/default/rerun/claims.json]
    python -m tools.score_runs outputs/default other/outputs/default     # two runs of a profile, pooled

Each group is read from <outputs>/runs/<group>/<run>/seed*/history.csv; a group whose runs are missing or unfinished
(fewer iterations than its others) is left out with its claims, and so are pass@k (eval/passk.json) and every claim of
a group not named. The rules, intervals and verdicts are the report stage's (cory.report.claims) with the params'
report settings (params.yaml or $CORY_PARAMS); prints one line per claim and each effect's interval, and with
--claims-json writes the scored claims in claims.json's form (the report's `report.rerun` reads that form: the claims
left out are then "only in this run" there).

Several outputs folders (two repros of one commit, say) are pooled: each group's seeds of the second folder count as
further seeds after the first's, and so on, so the claims are judged on all of them. Two repros of one commit run the
same seed numbers, which differ only through float rounding and whatever was trained differently upstream: pooled,
they show what more seeds would decide, not a sample drawn with independent seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from cory.report.claims import (
    Context, ablation_claims, cooperation_claims, group_context, imdb_claims, math_claims, pareto_claim,
)
from cory.report.claims_text import needed_text, summary_json
from cory.files import read_json
from cory.report.results import SWEEP_RUNS, Sweep, expected_runs, group_model, load_run
from cory.runs.config import eta_name


def finished(runs: dict) -> bool:
    """Every seed of every run as long as the longest: a run stopped early would be compared at another iteration."""
    lengths = {len(history) for run in runs.values() for history in run.histories.values()}
    return len(lengths) == 1


def score(outputs: Path, groups: list[str], experiments: dict, seeds: list[int], cfg) -> list:
    """The claims of `groups` (names of `experiments`, params' experiment groups) on <outputs>/runs/, with the report
    settings `cfg`; `seeds`: the top-level seeds (a group's own seeds win)."""
    runs_dir = outputs / "runs"
    base_models = {path.stem: read_json(path) for path in sorted((outputs / "metrics" / "base_models").glob("*.json"))}
    claims = []
    for group in groups:
        exp = experiments[group]
        seeds_of = exp.seeds_of(seeds)
        try:  # a seed the train stage did not finish leaves its group out
            if exp.sweep_eta:
                sweep = Sweep(group, {name: {eta: load_run(runs_dir / group / f"{name}_{eta_name(eta)}", seeds_of)
                                             for eta in exp.sweep_eta} for name in SWEEP_RUNS})
            else:
                runs = {name: load_run(runs_dir / group / name, seeds_of)
                        for name in expected_runs(group, experiments)}
        except FileNotFoundError as exc:
            print(f"score_runs: {group}: left out ({exc})", file=sys.stderr)
            continue
        if exp.sweep_eta:
            if all(finished(by_eta) for by_eta in sweep.runs.values()):
                claims.append(pareto_claim(exp.task, sweep, Context(cfg)))
            continue
        if not finished(runs):
            print(f"score_runs: {group}: runs of unequal length (a run stopped early): left out", file=sys.stderr)
            continue
        if exp.task == "math":
            claims += math_claims(runs, Context(cfg))
            continue
        ctx = group_context(group, replace(cfg, imdb_groups=tuple(dict.fromkeys(("imdb", group)))),
                            group_model(group, runs, base_models))
        claims += imdb_claims(runs, ctx) + ablation_claims(runs, ctx) + cooperation_claims(runs, ctx)
    return claims


def pool(folders: list[Path], into: Path, experiments: dict, seeds: list[int]) -> dict:
    """Link the run folders of several outputs folders into `into`/runs/, renumbering seeds: a group's seed s of
    folder k becomes s + k * (the group's largest seed + 1). Returns `experiments` with each group's seeds set to
    the pooled ones (every seed of every folder; one a folder lacks is found missing when its group is read)."""
    pooled = {}
    for group, exp in experiments.items():
        own = exp.seeds_of(seeds)
        step = max(own) + 1
        pooled[group] = replace(exp, seeds=[s + k * step for k in range(len(folders)) for s in own])
        for k, folder in enumerate(folders):
            for run in sorted((folder / "runs" / group).glob("*")):
                for s in own:
                    source = run / f"seed{s}"
                    if source.is_dir():
                        target = into / "runs" / group / run.name / f"seed{s + k * step}"
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.symlink_to(source.resolve(), target_is_directory=True)
    return pooled


def check_outputs(folders: list[Path], tool: str) -> None:
    """One line naming the first folder that is not a profile's outputs folder (it has no runs/)."""
    for folder in folders:
        if not (folder / "runs").is_dir():
            raise SystemExit(f"{tool}: {folder}/runs: not found (give a profile's outputs folder)")


def finals(outputs: Path, last_n: int) -> list[str]:
    """One line per run and seed folder: its iterations and LLM1's (and LLM2's) final task reward, KL and combined
    reward (means of the last `last_n` iterations), finished or not."""
    import pandas as pd

    lines = []
    for history in sorted((outputs / "runs").glob("*/*/seed*/history.csv")):
        rows = pd.read_csv(history)
        end = rows.tail(last_n)
        cells = [f"{history.parent.relative_to(outputs / 'runs')}", f"{len(rows)} it."]
        for agent in ("llm1", "llm2"):
            if f"{agent}/kl" in rows:
                cells.append(f"{agent} task {end[f'{agent}/task_reward'].mean():.2f} KL {end[f'{agent}/kl'].mean():.1f} "
                             f"combined {end[f'{agent}/combined_reward'].mean():.2f}")
        lines.append("  ".join(cells))
    return lines


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outputs", type=Path, nargs="+",
                        help="a profile's outputs folder, e.g. outputs/default; several are pooled")
    parser.add_argument("--groups", nargs="+", help="experiment groups to score (default: every group of the params)")
    parser.add_argument("--last-n", type=int, help="final value = mean of the last N iterations (default: report.last_n)")
    parser.add_argument("--finals", action="store_true", help="print every run's final values instead of the claims")
    parser.add_argument("--claims-json", type=Path, help="also write the scored claims there, in claims.json's form")
    args = parser.parse_args(argv)
    from pipeline.params import load_params

    params = load_params()
    cfg = params.report if args.last_n is None else replace(params.report, last_n=args.last_n)
    check_outputs(args.outputs, "score_runs")
    if args.finals:
        for outputs in args.outputs:
            print("\n".join(finals(outputs, cfg.last_n)))
        return
    groups = args.groups or list(params.experiments)
    with tempfile.TemporaryDirectory() as tmp:
        outputs, experiments = args.outputs[0], params.experiments
        if len(args.outputs) > 1:
            outputs, experiments = Path(tmp), pool(args.outputs, Path(tmp), params.experiments, params.seeds)
        claims = score(outputs, groups, experiments, params.seeds, cfg)
    if args.claims_json is not None:
        args.claims_json.parent.mkdir(parents=True, exist_ok=True)
        args.claims_json.write_text(json.dumps(summary_json(claims), indent=2) + "\n")
    for claim in claims:
        print(f"{claim.verdict:>14}  {claim.key}: {claim.paper}")
        for result in claim.results:
            i = result.interval
            print(f"{'':16}{result.label}: {i.estimate:.3g} [{i.low:.3g}, {i.high:.3g}] {result.op} {result.threshold:g}"
                  f" -> {result.verdict} (seeds {dict(result.seeds)}; needed: {needed_text(result.seeds_needed)})")
        for note in claim.notes:
            print(f"{'':16}{note}")


if __name__ == "__main__":
    from pipeline.common import run_stage

    run_stage(lambda: main(sys.argv[1:]))
