"""TEST FIXTURE ONLY: a fake outputs/<profile>/ tree with hand-chosen curves, never used for real figures, and the
report's inputs and claims read from it. With the defaults every claim of the paper holds by construction (e.g.
PPO's final KL ~ 3x CORY's). Also `run_of`, a report Run straight from curves."""

import json
import math
import shutil

import numpy as np
import pandas as pd

from cory.report.claims import HELD, INCONCLUSIVE, NOT_HELD, Claim, build_claims
from cory.report.config import MechanismConfig, ReportConfig
from cory.report.results import Run, load_inputs
from cory.report.stats import NOT_MEASURABLE as UNMEASURED, side, within
from cory.rl.metrics import MetricsWriter
from cory.runs.config import ExperimentConfig
from cory.schema import from_dict


FIGURES = ("fig2c_pareto", "fig2c_pareto_math", "fig3_imdb", "fig4_math", "fig5_passk", "fig6_ablations",
           "fig_coop_vs_comp", "fig_diversity")
MECHANISM_RUNS = ("ppo", "ppo_kl045", "cory", "cory_no_kt")
"""The fixture's mechanism group (`write_fixture(mechanism=True)`): PPO at two KL coefficients, CORY, its control."""
MECHANISM = MechanismConfig(group="imdb_smollm2", frontier=["ppo", "ppo_kl045"], cory=["cory"], control="cory_no_kt")


def _rise(t, top, tau):
    return top * (1 - np.exp(-t / tau))


def _write_run(run_dir, identities, iterations, seed, coef=1.0, swap_every=None, eta=0.3, leak=False, held_out=0,
               model="imdb_small"):
    """identities: {"llm1": (task_reward curve, kl curve), ...}; LLM1 starts as pioneer, roles swap every swap_every;
    `leak`: the last iteration's answers carry a chat-template token; `held_out`: so many held-out queries answered
    by LLM1 before training and by each identity after (as cory.runs.run logs them); `model`: the base model its
    provenance.json names."""
    writer = MetricsWriter(run_dir)
    roles = ["llm1", "llm2"]
    samples = []
    for it in range(iterations):
        row = {"swap": 0.0, "timing/generation": 0.1, "timing/scoring": 0.05, "timing/update": 0.2,
               "timing/iteration": 0.35}
        by_role = dict(zip(("pioneer", "observer"), roles))
        for name, (reward, kl) in identities.items():
            role = [r for r, who in by_role.items() if who == name][0]
            # diversity falls with KL (so each method draws its own curve); the length is the sampler's, alike for all
            values = {"task_reward": reward[it], "kl": kl[it], "combined_reward": reward[it] - eta * kl[it],
                      "kl_coef": eta, "entropy": 3.0 - 0.05 * kl[it], "response_length": 10.0,
                      "distinct_1": 0.6 - 0.01 * kl[it], "distinct_2": 0.9 * np.exp(-kl[it] / 10)}
            row.update({f"{name}/{k}": v for k, v in values.items()})
            row[f"{name}/role"] = float(role == "observer")
            row.update({f"{role}/{k}": v for k, v in values.items()})
        if it in (0, iterations - 1):
            entry = {"iteration": it, "query": "This is one of Jackies" if it == 0 else "A film"}
            for role, who in by_role.items():
                if who in identities:
                    said = " <|im_start|>" if leak and it == iterations - 1 else ""
                    entry.update({f"{role}_agent": who, f"{role}_prompt": f"<{role} prompt>",
                                  f"{role}_response": f" {who} says | good{said}", f"{role}_score": 1.5})
            samples += [entry, {**entry, "query": "Another query"}]
        if len(identities) == 2 and swap_every and (it + 1) % swap_every == 0:
            roles.reverse()
            row["swap"] = 1.0
        writer.log(it, row)
    for it, agents in ((-1, ["llm1"]), (iterations, list(identities))):
        samples += [{"iteration": it, "query": f"held-out query {q}", "pioneer_agent": who, "pioneer_prompt": "<p>",
                     "pioneer_response": f" {who} at {it} on {q}", "pioneer_score": 0.5 + q, "held_out": True}
                    for who in agents for q in range(held_out)]
    writer.samples(samples)
    phases = {"setup": 1.0, "samples": 0.5, "iterations": 8.0 + seed, "probes": 1.0, "checkpoints": 1.0, "save": 0.5}
    writer.summary(last_n=min(10, iterations), wall_time_s=12.0 + seed, run=str(run_dir), seed=seed,
                   algorithm="cory" if len(identities) == 2 else "ppo", phase_seconds=phases)
    config = {"iterations": iterations, "seed": seed, "ppo": {"init_kl_coef": eta, "learning_rate": 1.41e-5},
              "cory": {"n_agents": len(identities), "partner_reward_coef": coef}}
    (run_dir / "config.json").write_text(json.dumps(config))
    provenance = {"run": str(run_dir), "model": f"outputs/fixture/models/{model}"}
    (run_dir / "provenance.json").write_text(json.dumps(provenance))


SWEEP_ETAS = (0.01, 0.1, 0.3)


def fixture_experiments(seeds=(0, 1, 2), sweeps=("imdb", "math"), math_sweep_seeds=None, extra_imdb=None,
                        mechanism=False) -> dict:
    """The `experiments` params of the fixture tree (as params.yaml writes them): the report's groups, and a
    KL-coefficient sweep of each task in `sweeps`; the math sweep runs the first two seeds only (a group's own
    `seeds`), unless `math_sweep_seeds` says otherwise. `extra_imdb` is {group: its runs} of further IMDB groups;
    `mechanism` adds the group imdb_smollm2 with MECHANISM_RUNS."""
    runs = {"ppo": {"train": {"cory": {"n_agents": 1}}}, "cory": {}}
    experiments = {"imdb": {"task": "imdb", "runs": {name: {} for name in ("ppo", "ppo_2x", "cory", "cory_no_kt",
                                                                         "cory_no_rex", "cory_competitive")}},
                   "math": {"task": "math", "runs": runs}}
    if mechanism:
        experiments["imdb_smollm2"] = {"task": "imdb", "runs": {name: {} for name in MECHANISM_RUNS}}
    for group, names in (extra_imdb or {}).items():
        experiments[group] = {"task": "imdb", "runs": {name: {} for name in names}}
    if "imdb" in sweeps:
        experiments["pareto"] = {"task": "imdb", "sweep_eta": list(SWEEP_ETAS), "runs": runs}
    if "math" in sweeps:
        experiments["pareto_math"] = {"task": "math", "sweep_eta": list(SWEEP_ETAS), "runs": runs,
                                      "seeds": list(math_sweep_seeds or seeds[:2])}
    return experiments


def experiments_of(raw: dict) -> dict[str, ExperimentConfig]:
    return {group: from_dict(ExperimentConfig, spec, f"experiments.{group}") for group, spec in raw.items()}


def fixture_seeds(outputs) -> tuple[int, ...]:
    """The seeds a fixture tree was written with (those of runs/imdb/ppo/)."""
    return tuple(sorted(int(p.name[4:]) for p in (outputs / "runs" / "imdb" / "ppo").glob("seed*")))


def load_fixture(outputs, seeds=None, imdb_groups=(), rule=None, **options):
    """load_inputs on a fixture tree with its params (`options`: fixture_experiments'); `rule`: report.mechanism."""
    raw = fixture_experiments(**{"seeds": fixture_seeds(outputs), "mechanism": rule is not None, **options})
    return load_inputs(outputs, experiments_of(raw), seeds, imdb_groups, rule)


def frontier(kl: np.ndarray) -> np.ndarray:
    """The fixture's task reward along PPO's path: every PPO run, whatever its KL coefficient, walks it."""
    return 3.0 * (1 - np.exp(-kl / 10))


def write_fixture(outputs, seeds=(0, 1, 2), iterations=30, cory_kl=5.0, skip=(), math_cory_gain=0.3,
                  math_sweep_seeds=None, mechanism=None, leak=(), held_out=0):
    """Fake run tree: `cory_kl` (a number, or {seed: number}) is the level CORY's KL saturates at on IMDB, PPO's
    final KL is ~14.7; `math_cory_gain` is how much higher CORY's final task reward is than PPO's at each eta of
    the math sweep (run on `math_sweep_seeds`, default the first two seeds); folders named in `skip` ("math",
    "imdb/cory", ...) are left out; `leak`: runs whose last answers leak a template token; `held_out`: held-out
    queries each IMDB run answers alone (cory.runs.run). `mechanism` writes the
    group imdb_smollm2 (MECHANISM_RUNS): PPO at two KL coefficients on one path (`frontier`), and CORY with
    `mechanism` x PPO's reward at each KL ("above": 1.5, "dilution": 1.0, i.e. PPO's path, later) or, for "noisy",
    1.1 x with +-0.6 of seed noise; its control always walks PPO's path."""
    t = np.arange(iterations, dtype=float)
    for seed in seeds:
        s = 1 + 0.02 * seed  # seeds differ a little, so the std is not zero
        ckl = cory_kl[seed] if isinstance(cory_kl, dict) else cory_kl
        ckl *= 1 + 0.02 * (seed % 2)  # CORY's KL moves apart from PPO's a little, seed by seed
        cory = {"llm1": (_rise(t, 1.9 * s, 5), _rise(t, ckl * s, 5)),
                "llm2": (_rise(t, 1.88 * s, 5), _rise(t, ckl * s * 1.02, 5))}
        runs = {
            "imdb/ppo": ({"llm1": (_rise(t, 2.0 * s, 5), 0.6 * t * s)}, {}),
            "imdb/ppo_2x": ({"llm1": (_rise(t, 2.1 * s, 2), 1.0 * t * s)}, {}),
            "imdb/cory": (cory, {"swap_every": 5}),
            "imdb/cory_no_kt": ({k: (r + 0.4 * np.sin(t), 1.6 * kl) for k, (r, kl) in cory.items()},
                                {"swap_every": 5}),
            "imdb/cory_no_rex": ({"llm1": (cory["llm1"][0], _rise(t, 12 * s, 5)),
                                  "llm2": (cory["llm2"][0], _rise(t, 7 * s, 5))}, {}),
            "imdb/cory_competitive": ({"llm1": (_rise(t, 1.0 * s, 5), _rise(t, 9 * s, 5)),
                                       "llm2": (_rise(t, 1.0 * s, 5), _rise(t, 9 * s, 5))},
                                      {"swap_every": 5, "coef": -0.5}),
            "math/ppo": ({"llm1": (0.4 * s * np.exp(-(((t - 12) / 6) ** 2)), 0.5 * t * s)}, {"eta": 0.01}),
            "math/cory": ({"llm1": (_rise(t, 0.5 * s, 5), _rise(t, 3 * s, 5)),
                           "llm2": (_rise(t, 0.49 * s, 5), _rise(t, 3 * s, 5))}, {"swap_every": 5, "eta": 0.01}),
        }
        if mechanism:
            kl = {"ppo": 0.6 * t * s, "ppo_kl045": 0.4 * t * s, "cory": 0.35 * t * s, "cory_no_kt": 0.3 * t * s}
            above = {"above": 1.5, "dilution": 1.0, "noisy": 1.1}[mechanism]
            shift = 0.6 * (-1) ** seed * (1 - np.exp(-t / 5)) if mechanism == "noisy" else 0.0
            for name, eta in (("ppo", 0.03), ("ppo_kl045", 0.045)):
                runs[f"imdb_smollm2/{name}"] = ({"llm1": (frontier(kl[name]), kl[name])}, {"eta": eta})
            cory = (above * frontier(kl["cory"]) + shift, kl["cory"])
            runs["imdb_smollm2/cory"] = ({"llm1": cory, "llm2": cory}, {"eta": 0.03, "swap_every": 5})
            control = (frontier(kl["cory_no_kt"]), kl["cory_no_kt"])
            runs["imdb_smollm2/cory_no_kt"] = ({"llm1": control, "llm2": control}, {"eta": 0.03, "swap_every": 5})
        for eta in (0.01, 0.1, 0.3):
            worse = (_rise(t, (2 - 2 * eta) * s, 5), _rise(t, (10 - 20 * eta) * s, 5))
            runs[f"pareto/ppo_eta{eta:g}"] = ({"llm1": worse}, {"eta": eta})
            good = (_rise(t, (3.0 - 2 * eta) * s, 5), _rise(t, (5 - 10 * eta) * s, 5))
            runs[f"pareto/cory_eta{eta:g}"] = ({"llm1": good, "llm2": good}, {"eta": eta, "swap_every": 5})
            if seed in (math_sweep_seeds or seeds[:2]):  # the math sweep: share correct, PPO's KL above CORY's
                ppo_math = (_rise(t, (0.5 - eta) * s, 5), _rise(t, (3 - 5 * eta) * s, 5))
                runs[f"pareto_math/ppo_eta{eta:g}"] = ({"llm1": ppo_math}, {"eta": eta})
                cory_math = (_rise(t, (0.5 + math_cory_gain - eta) * s, 5), _rise(t, (2 - 4 * eta) * s, 5))
                runs[f"pareto_math/cory_eta{eta:g}"] = ({"llm1": cory_math, "llm2": cory_math},
                                                        {"eta": eta, "swap_every": 5})
        for name, (identities, options) in runs.items():
            if name in skip or name.split("/")[0] in skip:
                continue
            model = ("imdb_large" if name == "imdb/ppo_2x" else "smollm2" if name.startswith("imdb_smollm2")
                     else "math" if name.startswith(("math", "pareto_math")) else "imdb_small")
            _write_run(outputs / "runs" / name / f"seed{seed}", identities, iterations, seed, leak=name in leak,
                       held_out=held_out if name.startswith("imdb") else 0, model=model, **options)
    ks = ["1", "2", "4"]

    def passk(values, model_seeds):
        per_seed = {str(sd): {k: v * (1 + 0.01 * i) for k, v in zip(ks, values)} for i, sd in enumerate(model_seeds)}
        return {"seeds": per_seed, "mean": {k: float(np.mean([r[k] for r in per_seed.values()])) for k in ks},
                "std": {k: float(np.std([r[k] for r in per_seed.values()])) for k in ks}}

    write(outputs / "eval" / "passk.json", {
        "base": passk([0.10, 0.15, 0.20], ["none"]), "ppo": passk([0.12, 0.18, 0.25], seeds),
        "cory_llm1": passk([0.18, 0.25, 0.33], seeds), "cory_llm2": passk([0.17, 0.24, 0.32], seeds)})
    write(outputs / "metrics" / "base_models" / "imdb_small.json",
          {"params": 29_000_000, "epochs": 12.0, "val_perplexity": 95.2, "peak_gpu_gib": 31.25})
    write(outputs / "metrics" / "base_models" / "imdb_large.json",
          {"params": 58_000_000, "epochs": 8.0, "param_ratio": 2.0})
    write(outputs / "metrics" / "base_models" / "smollm2.json", {"params": 134_515_008, "convert_seconds": 30.5})
    write(outputs / "metrics" / "reward_model.json", {"accuracy": 0.91, "accuracy_prefix16": 0.7, "params": 29_000_000})
    write(outputs / "samples" / "base_models" / "imdb_small.json",
          [{"prompt": "This is one of Jackies", "continuation": " best"}])
    write(outputs / "metrics" / "timing" / "train.json", {"stage": "train", "seconds": 300.0})
    write(outputs / "metrics" / "timing" / "evaluate.json", {"stage": "evaluate", "seconds": 60.5})


def write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def claims_by_key(outputs, seeds=None, experiments=None, **cfg):
    """The claims computed from a fixture tree, without drawing (figures are checked in two tests only: slow);
    `experiments`: fixture_experiments' options."""
    groups = cfg.get("imdb_groups", ())
    inputs = load_fixture(outputs, seeds, groups, cfg.get("mechanism"), **(experiments or {}))
    return {c.key: c for c in build_claims(inputs, ReportConfig(**cfg))}


def copy_imdb_group(outputs, group, runs, model="smollm2"):
    """A second IMDB group in a fixture tree: copies of the `imdb` group's `runs`, started from `model`."""
    for name in runs:
        shutil.copytree(outputs / "runs" / "imdb" / name, outputs / "runs" / group / name)
        for provenance in (outputs / "runs" / group / name).glob("seed*/provenance.json"):
            provenance.write_text(json.dumps({"model": f"outputs/fixture/models/{model}"}))


def decided_by_its_intervals(claim: Claim) -> bool:
    """The verdict as the printed tests dictate: each statement's (its rank test's p, or where its interval lies
    against the threshold or margins), then the claim's rule over them."""
    tail = claim.settings.tail

    def expected(r) -> str:
        if r.kind == "direction":
            if math.isnan(r.p):
                return UNMEASURED
            return HELD if r.p <= tail else NOT_HELD if r.p_other <= tail else INCONCLUSIVE
        if r.kind == "similar":
            return within(r.interval, r.threshold)
        return side(r.interval, r.op, r.threshold)

    return all(r.verdict == expected(r) for r in claim.results) and claim.measured_verdict == claim.decide(
        claim.results)


def run_of(curves: dict[int, dict[str, np.ndarray]], config: dict | None = None, name: str = "group/run") -> Run:
    """A Run straight from curves: seed -> {history column: values over iterations}."""
    histories = {seed: pd.DataFrame({"iteration": np.arange(len(next(iter(c.values())))), **c})
                 for seed, c in curves.items()}
    return Run(name, histories, config or {}, [], {seed: 1.0 for seed in curves})
