import json
import math
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from cory.report.claims import (
    HELD, MIXED, NOT_HELD, NOT_MEASURABLE, Claim, build_claims, curve_gap, dominated_share, late_slope, max_drawdown, peak, reach_iteration, verdict,
)
from cory.schema import ConfigError, from_dict
from cory.runs.config import ExperimentConfig
from cory.report.markdown import glossary_markdown
from cory.rl.metrics import MetricsWriter
from cory.report.config import ReportConfig
from cory.report.markdown import claim_markdown
from cory.report.report import write_report
from cory.report.results import load_inputs

FIGURES = ("fig2c_pareto", "fig2c_pareto_math", "fig3_imdb", "fig4_math", "fig5_passk", "fig6_ablations",
           "fig_coop_vs_comp", "fig_diversity")


# --------------------------------------------------------------------------------------------------------------------
# TEST FIXTURE ONLY: a fake outputs/<profile>/ tree with hand-chosen curves, never used for real figures.
# With the defaults every claim of the paper holds by construction (e.g. PPO's final KL ~ 3x CORY's).
# --------------------------------------------------------------------------------------------------------------------


def _rise(t, top, tau):
    return top * (1 - np.exp(-t / tau))


def _write_run(run_dir, identities, iterations, seed, coef=1.0, swap_every=None, eta=0.3):
    """identities: {"llm1": (task_reward curve, kl curve), ...}; LLM1 starts as pioneer, roles swap every swap_every."""
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
                      "distinct_1": 0.6 - 0.01 * kl[it], "distinct_2": 0.9 - 0.01 * kl[it]}
            row.update({f"{name}/{k}": v for k, v in values.items()})
            row[f"{name}/role"] = float(role == "observer")
            row.update({f"{role}/{k}": v for k, v in values.items()})
        if it in (0, iterations - 1):
            entry = {"iteration": it, "query": "This is one of Jackies" if it == 0 else "A film"}
            for role, who in by_role.items():
                if who in identities:
                    entry.update({f"{role}_agent": who, f"{role}_prompt": f"<{role} prompt>",
                                  f"{role}_response": f" {who} says | good", f"{role}_score": 1.5})
            samples += [entry, {**entry, "query": "Another query"}]
        if len(identities) == 2 and swap_every and (it + 1) % swap_every == 0:
            roles.reverse()
            row["swap"] = 1.0
        writer.log(it, row)
    writer.samples(samples)
    phases = {"setup": 1.0, "samples": 0.5, "iterations": 8.0 + seed, "probes": 1.0, "checkpoints": 1.0, "save": 0.5}
    writer.summary(last_n=min(10, iterations), wall_time_s=12.0 + seed, run=str(run_dir), seed=seed,
                   algorithm="cory" if len(identities) == 2 else "ppo", phase_seconds=phases)
    config = {"iterations": iterations, "seed": seed, "ppo": {"init_kl_coef": eta, "learning_rate": 1.41e-5},
              "cory": {"n_agents": len(identities), "partner_reward_coef": coef}}
    (run_dir / "config.json").write_text(json.dumps(config))


SWEEP_ETAS = (0.01, 0.1, 0.3)


def fixture_experiments(seeds=(0, 1, 2), sweeps=("imdb", "math"), math_sweep_seeds=None) -> dict:
    """The `experiments` params of the fixture tree (as params.yaml writes them): the report's groups, and a
    KL-coefficient sweep of each task in `sweeps`; the math sweep runs the first two seeds only (a group's own
    `seeds`), unless `math_sweep_seeds` says otherwise."""
    runs = {"ppo": {"train": {"cory": {"n_agents": 1}}}, "cory": {}}
    experiments = {"imdb": {"task": "imdb", "runs": {name: {} for name in ("ppo", "ppo_2x", "cory", "cory_no_kt",
                                                                         "cory_no_rex", "cory_competitive")}},
                   "math": {"task": "math", "runs": runs}}
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


def load_fixture(outputs, seeds=None, **options):
    """load_inputs on a fixture tree with its params (`options`: fixture_experiments')."""
    raw = fixture_experiments(**{"seeds": fixture_seeds(outputs), **options})
    return load_inputs(outputs, experiments_of(raw), seeds)


def write_fixture(outputs, seeds=(0, 1, 2), iterations=30, cory_kl=5.0, skip=(), math_cory_gain=0.1):
    """Fake run tree: `cory_kl` (a number, or {seed: number}) is the level CORY's KL saturates at on IMDB, PPO's
    final KL is ~14.7; `math_cory_gain` is how much higher CORY's final task reward is than PPO's at each eta of
    the math sweep (run on the first two seeds only); folders named in `skip` ("math", "imdb/cory", ...) are left
    out."""
    t = np.arange(iterations, dtype=float)
    for seed in seeds:
        s = 1 + 0.02 * seed  # seeds differ a little, so the std is not zero
        ckl = cory_kl[seed] if isinstance(cory_kl, dict) else cory_kl
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
        for eta in (0.01, 0.1, 0.3):
            worse = (_rise(t, (2 - 2 * eta) * s, 5), _rise(t, (10 - 20 * eta) * s, 5))
            runs[f"pareto/ppo_eta{eta:g}"] = ({"llm1": worse}, {"eta": eta})
            good = (_rise(t, (2.2 - 2 * eta) * s, 5), _rise(t, (5 - 10 * eta) * s, 5))
            runs[f"pareto/cory_eta{eta:g}"] = ({"llm1": good, "llm2": good}, {"eta": eta, "swap_every": 5})
            if seed in seeds[:2]:  # the math sweep: share correct, PPO's KL above CORY's
                ppo_math = (_rise(t, (0.5 - eta) * s, 5), _rise(t, (3 - 5 * eta) * s, 5))
                runs[f"pareto_math/ppo_eta{eta:g}"] = ({"llm1": ppo_math}, {"eta": eta})
                cory_math = (_rise(t, (0.5 + math_cory_gain - eta) * s, 5), _rise(t, (2 - 4 * eta) * s, 5))
                runs[f"pareto_math/cory_eta{eta:g}"] = ({"llm1": cory_math, "llm2": cory_math},
                                                        {"eta": eta, "swap_every": 5})
        for name, (identities, options) in runs.items():
            if name in skip or name.split("/")[0] in skip:
                continue
            _write_run(outputs / "runs" / name / f"seed{seed}", identities, iterations, seed, **options)
    ks = ["1", "2", "4"]

    def passk(values, model_seeds):
        per_seed = {str(sd): {k: v * (1 + 0.01 * i) for k, v in zip(ks, values)} for i, sd in enumerate(model_seeds)}
        return {"seeds": per_seed, "mean": {k: float(np.mean([r[k] for r in per_seed.values()])) for k in ks},
                "std": {k: float(np.std([r[k] for r in per_seed.values()])) for k in ks}}

    write(outputs / "eval" / "passk.json", {
        "base": passk([0.10, 0.15, 0.20], ["none"]), "ppo": passk([0.12, 0.18, 0.25], seeds),
        "cory_llm1": passk([0.18, 0.25, 0.33], seeds), "cory_llm2": passk([0.17, 0.24, 0.32], seeds)})
    write(outputs / "metrics" / "base_models" / "imdb_small.json",
          {"params": 29_000_000, "val_perplexity": 95.2, "peak_gpu_gib": 31.25})
    write(outputs / "metrics" / "base_models" / "imdb_large.json", {"params": 58_000_000, "param_ratio": 2.0})
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
    return {c.key: c for c in build_claims(load_fixture(outputs, seeds, **(experiments or {})), ReportConfig(**cfg))}


# --------------------------------------------------------------------------------------------------------------------
# Statistics and the verdict rule, by hand
# --------------------------------------------------------------------------------------------------------------------


def test_curve_statistics_by_hand():
    assert late_slope(np.array([5.0, 0.0, 1.0, 2.0, 3.0])) == pytest.approx(1.0)  # second half: 1, 2, 3
    assert math.isnan(late_slope(np.array([1.0])))
    assert max_drawdown(np.array([0.0, 2.0, 1.0, 3.0, 0.0]), 1) == 3.0
    assert max_drawdown(np.array([0.0, 1.0, 2.0]), 1) == 0.0
    # gain 10 - 0 = 10: 90% is first reached at iteration 2
    assert reach_iteration(np.array([0.0, 5.0, 9.5, 10.0, 10.0]), 1, 2) == 2.0
    assert math.isnan(reach_iteration(np.array([1.0, 0.5, 0.0]), 1, 1))
    # peak 4 at iteration 2, rise 4 - 0 over the start, final 2: fall 4 - 2
    assert peak(np.array([0.0, 2.0, 4.0, 3.0, 2.0]), 1, 1) == (2.0, 4.0, 2.0)
    assert peak(np.array([3.0, 2.0, 1.0, 0.0]), 1, 1) == (0.0, 0.0, 3.0)  # falls from the start: no rise
    # smoothed over 3: [2, 3, 4, 4.67, 5, 3, 2.67, 1]: peak 5 at iteration 4, rise over the smoothed start 2 (not
    # the raw 1) = 3, final value (last 2 raw: -2, 4) = 1, fall 5 - 1 = 4
    assert peak(np.array([1.0, 3.0, 5.0, 4.0, 5.0, 6.0, -2.0, 4.0]), 3, 2) == pytest.approx((4.0, 3.0, 4.0))
    assert curve_gap(np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0, 2.0]), 1) == 0.0
    assert curve_gap(np.array([0.0, 2.0]), np.array([1.0, 3.0]), 1) == pytest.approx(1.0 / 2.0)
    assert dominated_share([(1.0, 5.0), (2.0, 9.0)], [(1.5, 4.0)]) == 0.5


def test_verdict_rule():
    assert verdict(True, [True, True, True]) == HELD
    assert verdict(False, [False, False]) == NOT_HELD
    assert verdict(True, [True, False]) == MIXED
    assert verdict(False, [True, False]) == MIXED
    # a seed the rule could not be applied to (None) leaves neither "held" nor "did not hold"
    assert verdict(True, [True, True, None]) == MIXED
    assert verdict(False, [False, None]) == MIXED
    assert verdict(None, [None, None]) == NOT_MEASURABLE
    assert verdict(None, []) == NOT_MEASURABLE


def test_claim_broadcasts_an_unseeded_model_and_reports_nan_as_not_measurable():
    claim = Claim("k", "f.png", "paper", "rule", {"a": {0: 2.0, 1: 0.5}, "base": {None: 1.0}},
                  lambda v: v["a"] > v["base"])
    assert claim.seeds == [0, 1] and claim.holds() == {0: True, 1: False}
    assert claim.means() == {"a": 1.25, "base": 1.0} and claim.verdict == MIXED
    nan = Claim("k", "f.png", "paper", "rule", {"a": {0: math.nan}}, lambda v: v["a"] > 0)
    assert nan.verdict == NOT_MEASURABLE


def test_report_config_rejects_bad_values():
    with pytest.raises(ConfigError, match=r"^report.last_n: must be >= 1"):
        from_dict(ReportConfig, {"last_n": 0}, "report")
    with pytest.raises(ConfigError, match=r"^report.nope"):
        from_dict(ReportConfig, {"nope": 1}, "report")


# --------------------------------------------------------------------------------------------------------------------
# The report on the fixture
# --------------------------------------------------------------------------------------------------------------------


def test_report_on_fixture_writes_every_figure_and_holds_every_constructed_claim(tmp_path):
    outputs, reports = tmp_path / "outputs", tmp_path / "reports"
    write_fixture(outputs)
    cfg = ReportConfig(deviations={"ppo.batch_size": "128 | not 256: time"})
    experiments = experiments_of(fixture_experiments())
    claims = {c.key: c for c in write_report(outputs, reports, cfg, experiments, None, "fixture")[1]}
    assert {key: c.verdict for key, c in claims.items() if c.verdict != HELD} == {}
    assert claims["pareto"].seeds == [0, 1, 2] and claims["pareto_math"].seeds == [0, 1]  # the math sweep's own seeds
    kl = claims["imdb_kl_ratio"].means()
    assert 2.5 < kl["KL ratio PPO / CORY-LLM1"] < 3.5  # PPO final KL ~14.7 vs CORY ~4.97
    for name in FIGURES:
        assert (reports / f"{name}.png").stat().st_size > 10_000, name
    report = (reports / "REPORT.md").read_text()
    for i, claim in enumerate(claims.values(), 1):
        assert f"### {i}. {claim.paper}" in report
    assert report.count("**Verdict: held**") == len(claims)
    assert "| `ppo.batch_size` | 128 \\| not 256: time |" in report
    assert "| **total** | 360.5 |" in report and "29,000,000" in report and "ppo.init_kl_coef" in report
    # a stage's own process and its workers' GPU memory are told apart: the base models' peak is in their table
    assert "peak GPU memory of the stage's own process (GiB)" in report
    assert "| model | params | param_ratio | val_perplexity | train_tokens | epochs | train_seconds | peak_gpu_gib |" in report
    assert "31.25" in report
    # each run's time by phase, mean over seeds 0-2: iterations 8 + 1, samples and probes 1.5, checkpoints 1, rest 1.5
    assert "| imdb/cory | 13.00 ± 0.82 (3 seeds) | 9.0 / 1.5 / 1.0 / 1.5 |" in report
    for name in FIGURES:
        assert f"({name}.png)" in report
    assert (reports / "METRICS.md").read_text() == glossary_markdown()
    samples = (reports / "samples.md").read_text()
    assert "This is one of Jackies" in samples and "llm1 says \\| good" in samples
    assert json.loads((reports / "claims.json").read_text())["imdb_kl_ratio"]["verdict"] == HELD


def test_kl_ratio_verdict_follows_the_fixture_numbers(tmp_path):
    write_fixture(tmp_path / "low", cory_kl=10.0)  # PPO KL ~14.7 / CORY ~9.9 = 1.5 on every seed
    claim = claims_by_key(tmp_path / "low")["imdb_kl_ratio"]
    assert claim.verdict == NOT_HELD and claim.means()["KL ratio PPO / CORY-LLM1"] < 2
    write_fixture(tmp_path / "mixed", cory_kl={0: 5.0, 1: 5.0, 2: 10.0})  # seed 2 alone falls under 2x
    claim = claims_by_key(tmp_path / "mixed")["imdb_kl_ratio"]
    assert claim.holds() == {0: True, 1: True, 2: False} and claim.verdict == MIXED
    assert ("- **Verdict: mixed** (the rule holds on 2/3 seeds: 0, 1; holds on the means over seeds 0, 1, 2)"
            in claim_markdown(1, claim))


def test_one_seed_and_few_iterations_give_numbers_for_every_claim(tmp_path):
    write_fixture(tmp_path, seeds=(0,), iterations=3)
    claims = claims_by_key(tmp_path, seeds=[0])
    assert claims["imdb_kl_ratio"].seeds == [0]
    assert all(c.verdict != MIXED for c in claims.values())  # one seed: the means are that seed's values
    assert claims["math_ppo_peak"].verdict in (NOT_HELD, NOT_MEASURABLE)  # 3 iterations hold no peak-then-decline
    assert "(1 seed)" in "\n".join(claim_markdown(1, claims["imdb_kl_ratio"]))


def test_missing_group_run_seed_or_file_is_one_clear_error(tmp_path):
    full = tmp_path / "full"
    write_fixture(full, seeds=(0,), iterations=4)
    with pytest.raises(FileNotFoundError, match=r"runs/imdb/ppo/seed1/history.csv: not found"):
        load_fixture(full, seeds=[0, 1])
    # a sweep group's own seeds are read as params give them: seed 1 of the math sweep was never written
    with pytest.raises(FileNotFoundError, match=r"runs/pareto_math/ppo_eta0.01/seed1/history.csv: not found"):
        load_fixture(full, math_sweep_seeds=[0, 1])
    (full / "eval" / "passk.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"eval/passk.json: not found"):
        load_fixture(full)
    # every eta of a sweep's sweep_eta is read (a missing one is not silently left off the frontier)
    for skipped, message in (("math", r"runs/math: experiment group folder not found"),
                             ("imdb/cory_no_rex", r"runs/imdb/cory_no_rex: run folder not found"),
                             ("pareto_math/cory_eta0.1", r"runs/pareto_math/cory_eta0.1: run folder not found"),
                             ("pareto_math", r"runs/pareto_math: experiment group folder not found")):
        partial = tmp_path / skipped.replace("/", "_")
        write_fixture(partial, seeds=(0,), iterations=4, skip=(skipped,))
        with pytest.raises(FileNotFoundError, match=message):
            load_fixture(partial)
    no_sweep = tmp_path / "pareto_math"
    assert set(load_fixture(no_sweep, sweeps=("imdb",)).sweeps) == {"imdb"}  # params without it: not read


def test_stage_main_on_a_one_seed_three_iteration_tree_writes_every_figure(tmp_path, monkeypatch):
    import pipeline.paths
    import pipeline.report

    write_fixture(tmp_path / "outputs" / "fixture", seeds=(0,), iterations=3)
    monkeypatch.setattr(pipeline.paths, "ROOT", tmp_path)
    monkeypatch.setattr(pipeline.report, "ROOT", tmp_path)
    params = SimpleNamespace(profile="fixture", seeds=[0], report=ReportConfig(),  # the sections the stage reads
                             experiments=experiments_of(fixture_experiments(seeds=(0,))))
    monkeypatch.setattr(pipeline.report, "load_params", lambda: params)
    pipeline.report.main()
    reports = tmp_path / "reports" / "fixture"
    for name in FIGURES:
        assert (reports / f"{name}.png").stat().st_size > 5_000, name
    assert "(1 seed)" in (reports / "REPORT.md").read_text()
    timing = json.loads((tmp_path / "outputs" / "fixture" / "metrics" / "timing" / "report.json").read_text())
    assert timing["stage"] == "report"


def test_each_tasks_frontier_is_judged_on_its_own_sweep(tmp_path):
    write_fixture(tmp_path, math_cory_gain=-0.2)  # on math, CORY's share correct is 0.2 below PPO's at every eta
    claims = claims_by_key(tmp_path)
    assert claims["pareto"].verdict == HELD and claims["pareto_math"].verdict == NOT_HELD
    assert claims["pareto_math"].means() == {"share of PPO points dominated by CORY-LLM1": 0.0,
                                             "share of PPO points dominated by CORY-LLM2": 0.0}
    assert claims["pareto_math"].figure == "fig2c_pareto_math.png" and claims["pareto"].figure == "fig2c_pareto.png"
    rule = claims["pareto_math"].rule
    assert "the share of correct answers" in rule and "group `pareto_math`" in rule
    assert "the sentiment logit" in claims["pareto"].rule


@pytest.mark.parametrize("sweeps", [("imdb",), ()])
def test_a_profile_without_a_sweep_still_gets_a_report_whose_frontier_claim_is_not_measurable(tmp_path, sweeps):
    outputs, reports = tmp_path / "outputs", tmp_path / "reports"
    write_fixture(outputs, seeds=(0, 1), iterations=6, skip=("pareto_math", "pareto"))
    if "imdb" in sweeps:
        write_fixture(tmp_path / "with_imdb", seeds=(0, 1), iterations=6)
        shutil.copytree(tmp_path / "with_imdb" / "runs" / "pareto", outputs / "runs" / "pareto")
    experiments = experiments_of(fixture_experiments(seeds=(0, 1), sweeps=sweeps))
    claims = {c.key: c for c in write_report(outputs, reports, ReportConfig(), experiments, None, "fixture")[1]}
    assert claims["pareto_math"].verdict == NOT_MEASURABLE and claims["pareto_math"].figure == ""
    assert (claims["pareto"].verdict == NOT_MEASURABLE) == ("imdb" not in sweeps)
    assert not (reports / "fig2c_pareto_math.png").exists()
    assert (reports / "fig2c_pareto.png").exists() == ("imdb" in sweeps)
    report = (reports / "REPORT.md").read_text()
    assert "No Pareto sweep of task `math`: no experiment group has task math and a sweep_eta." in report
    assert "Figure: none" in report and "(fig2c_pareto_math.png)" not in report
    assert json.loads((reports / "claims.json").read_text())["pareto_math"] == {"verdict": NOT_MEASURABLE, "means": {}}


def test_claim_without_common_seeds_is_not_measurable():
    claim = Claim("k", "f.png", "paper", "rule", {"a": {0: 1.0}, "b": {1: 2.0}, "c": {}}, lambda v: v["a"] < v["b"])
    assert claim.seeds == [] and claim.verdict == NOT_MEASURABLE
    assert "n/a" in "\n".join(claim_markdown(1, claim))
