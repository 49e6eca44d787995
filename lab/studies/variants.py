"""Short training runs of train-setting variants side by side, on the profile's real data and models.

    python -m lab.studies.variants write --group imdb --iterations 80 --seeds 0 1 \
        --run ppo=cory.n_agents=1 --run ppo_nodrop=cory.n_agents=1,ppo.dropout=none > /tmp/variants.yaml
    CORY_PARAMS=/tmp/variants.yaml python -m pipeline.train variants
    python -m lab.studies.variants summary                   # outputs/<profile>/runs/variants/*/seed*/history.csv

With `write --evaluate` the runs keep LLM1's weights and `evaluation.models` names them, so
`CORY_PARAMS=/tmp/variants.yaml python -m pipeline.evaluate` gives each run's held-out pass@k beside the base model's.

`write` prints a params file: the profile's params (params.yaml or $CORY_PARAMS) with one experiment group,
`variants`, whose runs are the named group's task and train settings plus each --run's dotted KEY=VALUE overrides
(comma-separated, values read as YAML, as benchmark/rl.py --variant reads them). `pipeline.train` then runs them like
any group (all at once with runtime.workers), after the group's data and base-model stages have run.
`summary` prints LLM1's metrics averaged over blocks of iterations, and each run's last logged samples.
`drift` asks why a run's training reward moves: for each math run with saved weights it scores, with the evaluate
stage's sampling, the base model and the run's LLM1 on the problems of the run's first and last --block iterations (the problems
training drew: base@first vs base@last is their difficulty, llm1 vs base on the same problems what training changed,
and llm1@last vs the reward the run logged on them training-time vs evaluation-time sampling).
`materialize` turns the newest resume checkpoint of every run that was stopped early (a time limit) into an LLM1 model
folder, so that `pipeline.evaluate` can score it; it prints the iteration each one reached.
lab/studies/diagnostics.sh holds the diagnostics behind the default profile's report.deviations, made this way.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import sys
from pathlib import Path

import yaml

from cory.schema import ConfigError
from lab.params_file import dotted, written_params

GROUP = "variants"
METRICS = ["task_reward", "probe_task_reward", "kl", "entropy", "policy_clipfrac", "approx_kl", "value_loss", "response_length"]


def write(group: str, iterations: int | None, seed_list: list[int] | None, runs: list[str],
          evaluate: bool = False, base: str = "") -> dict:
    from cory.schema import merge

    params = written_params()  # checked valid before it is changed
    if group not in (params.get("experiments") or {}):
        raise ConfigError(f"--group: no experiment group {group!r} in the params (have: {list(params['experiments'])})")
    variant_group = copy.deepcopy(params["experiments"][group])
    variant_group.pop("sweep_eta", None)
    variant_group["save_models"] = False
    variant_group["runs"] = {}
    for spec in runs:
        name, sep, settings = spec.partition("=")
        if not sep or not name:
            raise ConfigError(f"--run {spec!r}: expected NAME=KEY=VALUE[,KEY=VALUE...]")
        variant_group["runs"][name] = {"train": dotted(settings)}
    params["experiments"] = {GROUP: variant_group}
    if base:  # settings of the group's base model (then run its base_models stage with these params too)
        model = params["tasks"][variant_group["task"]]["model"]
        params["base_models"][model] = merge(params["base_models"][model], dotted(base))
    if evaluate:  # keep LLM1 of every run and let the evaluate stage score it next to the base model
        variant_group["save_models"] = True
        base = params["tasks"][variant_group["task"]]["model"]
        params["evaluation"]["models"] = {"base": f"models/{base}", **{
            name: f"checkpoints/{GROUP}/{name}/seed{{seed}}/llm1" for name in variant_group["runs"]}}
    if iterations:  # the group's own train.iterations (the default's math groups set one) would win over the top level
        params["train"]["iterations"] = iterations
        if "iterations" in (variant_group.get("train") or {}):
            variant_group["train"]["iterations"] = iterations
    if seed_list:  # the variants run these seeds, whatever the group runs
        params["seeds"] = seed_list
        variant_group.pop("seeds", None)
    return params


def _mean(cells: list[str]) -> float:
    """Mean of a block's logged cells (a metric measured only some iterations, e.g. the probe, leaves others empty)."""
    values = [float(c) for c in cells if c not in ("", None)]
    return sum(values) / len(values) if values else float("nan")


def summary(root: Path, block: int = 10) -> None:
    for run in sorted(root.glob("*/seed*")):
        rows = list(csv.DictReader(open(run / "history.csv")))
        finished = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else None
        cost = (f"; {finished['wall_time_s']:.0f} s, peak GPU memory {finished['peak_gpu_memory_gib']:.2f} GiB"
                if finished and finished.get("peak_gpu_memory_gib") is not None else "")
        print(f"{run.parent.name}/{run.name}  (means over blocks of {block} iterations{cost})")
        print("  iters " + " ".join(m[:9].rjust(9) for m in METRICS))
        for start in range(0, len(rows), block):
            part = rows[start : start + block]
            means = [_mean([r.get(f"llm1/{m}", "") for r in part]) for m in METRICS]
            print(f"  {start:3d}+  " + " ".join(f"{v:9.3f}" for v in means))
        samples_file = run / "samples.jsonl"  # written when a run ends
        samples = [json.loads(line) for line in open(samples_file)] if samples_file.is_file() else []
        for s in samples[-2:]:
            print(f"  sample (iteration {s['iteration']}): {s['query']!r} -> {s['pioneer_response']!r}")


def materialize(params) -> None:
    """Write <checkpoint_dir>/llm1/ from <checkpoint_dir>/resume/ for the variant runs that a time limit stopped."""
    from safetensors.torch import load_model

    from cory.runs.run import load_lm
    from cory.tasks.tokenizer import load_tokenizer
    from pipeline.paths import out_dir

    base = out_dir(params, "models", params.tasks[params.experiments[GROUP].task].model)
    for resume in sorted(out_dir(params, "checkpoints", GROUP).glob("*/seed*/resume")):
        target = resume.parent / "llm1"
        latest = resume / "latest"
        if (target / "config.json").is_file() or not latest.is_file():
            continue
        checkpoint = resume / latest.read_text().strip()
        lm = load_lm(str(base), "cpu")
        load_model(lm, str(checkpoint / "llm1.safetensors"))
        lm.save_pretrained(target)
        load_tokenizer(str(base)).save_pretrained(target)
        print(f"materialize: {target} from {checkpoint.name} (stopped early)")


def drift(params, block: int = 10, n_samples: int = 16) -> None:
    """Base model and LLM1 on the problems of each variant run's first and last `block` iterations (docstring above)."""
    import dataclasses

    import numpy as np
    from transformers import AutoModelForCausalLM

    from cory.tasks.evaluation import evaluate_pass_at_k
    from cory.runs.run import batches, load_queries
    from cory.tasks.tokenizer import load_tokenizer
    import torch

    from pipeline.paths import out_dir

    task = params.tasks[params.experiments[GROUP].task]
    queries, answers = load_queries(out_dir(params, task.prompts))
    cfg = dataclasses.replace(params.evaluation, n_samples=n_samples, ks=(1,))
    on = "cuda" if torch.cuda.is_available() else "cpu"

    def pass1(folder: Path, idx: np.ndarray) -> float:
        model = AutoModelForCausalLM.from_pretrained(folder).to(on)
        result = evaluate_pass_at_k(model, load_tokenizer(str(folder)), [queries[i] for i in idx],
                                    [answers[i] for i in idx], cfg.prompt_template, cfg)
        return result["pass_at_k"][1]

    base, cache = out_dir(params, "models", task.model), {}
    print(f"drift: pass@1 ({n_samples} samples at the evaluate stage's settings) on the problems of each run's first "
          f"and last {block} iterations, beside the training reward the run logged on them")
    print("run/seed  iterations  base@first  base@last  llm1@first  llm1@last  logged@first  logged@last")
    for run in sorted(out_dir(params, "runs", GROUP).glob("*/seed*")):
        llm1 = out_dir(params, "checkpoints", GROUP, run.parent.name, run.name, "llm1")
        if not (llm1 / "config.json").is_file():
            continue
        train = json.loads((run / "config.json").read_text())
        ppo, seed = train["ppo"], int(run.name.removeprefix("seed"))
        rows = list(csv.DictReader(open(run / "history.csv")))
        order = list(batches(len(queries), ppo["batch_size"] // ppo["samples_per_query"], train["iterations"], seed))
        first, last = np.concatenate(order[:block]), np.concatenate(order[len(rows) - block : len(rows)])
        key = (len(order[0]), seed, len(rows))
        if key not in cache:
            cache[key] = pass1(base, first), pass1(base, last)
        logged = [np.mean([float(r["llm1/task_reward"]) for r in part]) for part in (rows[:block], rows[-block:])]
        print(f"{run.parent.name}/{run.name}  0-{block - 1},{len(rows) - block}-{len(rows) - 1}  "
              f"{cache[key][0]:.3f}  {cache[key][1]:.3f}  {pass1(llm1, first):.3f}  {pass1(llm1, last):.3f}  "
              f"{logged[0]:.3f}  {logged[1]:.3f}", flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="print a params file with the variant runs")
    w.add_argument("--group", required=True, help="experiment group whose task and settings the variants start from")
    w.add_argument("--iterations", type=int)
    w.add_argument("--seeds", type=int, nargs="+")
    w.add_argument("--run", action="append", required=True, help="NAME=KEY=VALUE[,KEY=VALUE...] (train settings)")
    w.add_argument("--base", default="", help="KEY=VALUE[,KEY=VALUE...] settings of the group's base model")
    w.add_argument("--evaluate", action="store_true",
                   help="save each run's LLM1 and point `evaluation.models` at them (then: python -m pipeline.evaluate)")
    s = sub.add_parser("summary", help="print the variant runs' metrics")
    s.add_argument("root", nargs="?", help="default: outputs/<profile>/runs/variants")
    sub.add_parser("materialize", help="LLM1 folders from the resume checkpoints of runs stopped early")
    d = sub.add_parser("drift", help="base model and LLM1 on the problems of the first and last iterations")
    d.add_argument("--block", type=int, default=10)
    d.add_argument("--samples", type=int, default=16)
    args = parser.parse_args(argv)
    if args.command == "write":
        yaml.safe_dump(write(args.group, args.iterations, args.seeds, args.run, args.evaluate, args.base), sys.stdout,
                       sort_keys=False)
    elif args.command in ("materialize", "drift"):
        from pipeline.params import load_params

        if args.command == "drift":
            drift(load_params(), args.block, args.samples)
        else:
            materialize(load_params())
    else:
        from pipeline.params import load_params
        from pipeline.paths import out_dir

        summary(Path(args.root) if args.root else out_dir(load_params(), "runs", GROUP))


if __name__ == "__main__":
    from pipeline.common import run_stage

    run_stage(lambda: main(sys.argv[1:]))
