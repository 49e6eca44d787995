import json
import math
import shutil
from types import SimpleNamespace

import numpy as np

import pytest

from cory.report.claims import (
    HELD,
    INCONCLUSIVE,
    NOT_HELD,
    NOT_MEASURABLE,
    NOT_TESTED,
    Claim,
    Effect,
    build_claims,
    curve_gap,
    dominated_share,
    late_slope,
    max_drawdown,
    peak,
    reach_iteration,
)
from cory.schema import ConfigError, from_dict
from cory.runs.config import ExperimentConfig
from cory.report.markdown import glossary_markdown
from cory.rl.metrics import MetricsWriter
from cory.report.claims import fall_factor
from cory.report.config import ReportConfig
from cory.report.markdown import claim_markdown
from cory.report.report import write_report
from cory.report.stats import combine, side, student_half_width
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


def fixture_experiments(seeds=(0, 1, 2), sweeps=("imdb", "math"), math_sweep_seeds=None, extra_imdb=None) -> dict:
    """The `experiments` params of the fixture tree (as params.yaml writes them): the report's groups, and a
    KL-coefficient sweep of each task in `sweeps`; the math sweep runs the first two seeds only (a group's own
    `seeds`), unless `math_sweep_seeds` says otherwise. `extra_imdb` is {group: its runs} of further IMDB groups."""
    runs = {"ppo": {"train": {"cory": {"n_agents": 1}}}, "cory": {}}
    experiments = {"imdb": {"task": "imdb", "runs": {name: {} for name in ("ppo", "ppo_2x", "cory", "cory_no_kt",
                                                                         "cory_no_rex", "cory_competitive")}},
                   "math": {"task": "math", "runs": runs}}
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


def load_fixture(outputs, seeds=None, imdb_groups=(), **options):
    """load_inputs on a fixture tree with its params (`options`: fixture_experiments')."""
    raw = fixture_experiments(**{"seeds": fixture_seeds(outputs), **options})
    return load_inputs(outputs, experiments_of(raw), seeds, imdb_groups)


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
    groups = cfg.get("imdb_groups", ())
    inputs = load_fixture(outputs, seeds, groups, **(experiments or {}))
    return {c.key: c for c in build_claims(inputs, ReportConfig(**cfg))}


def copy_imdb_group(outputs, group, runs):
    """A second IMDB group in a fixture tree: copies of the `imdb` group's `runs`."""
    for name in runs:
        shutil.copytree(outputs / "runs" / "imdb" / name, outputs / "runs" / group / name)


def decided_by_its_intervals(claim: Claim) -> bool:
    """The verdict as the printed intervals and thresholds dictate (each sub-condition, then their combination)."""
    ok = all(r.verdict == side(r.interval, r.op, r.threshold) for r in claim.results)
    return ok and claim.measured_verdict == combine([r.verdict for r in claim.results])


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


def test_fall_factor_by_hand():
    assert fall_factor(9.0, 1.5) == 6.0  # PPO's combined reward fell 6 times as much as CORY's
    assert fall_factor(-1.0, 2.0) == -0.5  # PPO's rose while CORY's fell
    assert fall_factor(2.0, -1.0) == math.inf  # CORY's did not fall at all, PPO's did
    assert fall_factor(-1.0, -1.0) == 0.0  # neither fell: PPO's fall is no larger than CORY's
    np.testing.assert_array_equal(fall_factor(np.array([9.0, 2.0]), np.array([1.5, 0.0])), [6.0, np.inf])


def two_runs(a: dict, b: dict, effects, tested=True) -> Claim:
    """A claim on quantity a of run A and b of run B (independent runs)."""
    return Claim("k", "f.png", "paper", "rule", {"a": a, "b": b}, {"a": "A", "b": "B"}, effects, tested=tested)


def test_sub_conditions_combine_into_the_claims_verdict():
    clear = Effect("a above 1", ("a",), lambda a: a, ">", 1.0)
    straddles = Effect("b above 1", ("b",), lambda b: b, ">", 1.0)
    fails = Effect("b above 5", ("b",), lambda b: b, ">", 5.0)
    a, b = {0: 2.0, 1: 2.5, 2: 3.0}, {0: 0.5, 1: 1.5, 2: 2.5}
    assert two_runs(a, b, [clear]).verdict == HELD
    assert two_runs(a, b, [clear, straddles]).verdict == INCONCLUSIVE
    assert two_runs(a, b, [clear, straddles, fails]).verdict == NOT_HELD
    claim = two_runs(a, b, [clear, straddles, fails], tested=False)
    assert claim.verdict == NOT_TESTED and claim.measured_verdict == NOT_HELD
    assert [r.verdict for r in claim.results] == [HELD, INCONCLUSIVE, NOT_HELD] and decided_by_its_intervals(claim)
    # seeds needed: with a sub-condition on the wrong side, the fewest that one needs decides the claim
    assert two_runs(a, b, [clear, fails]).seeds_needed == claim.results[2].seeds_needed
    assert two_runs(a, b, [clear, straddles]).seeds_needed == max(claim.results[0].seeds_needed,
                                                                  claim.results[1].seeds_needed)


def test_runs_of_different_algorithms_are_not_paired_by_seed():
    # A and B alike seed by seed: paired, a - b would be 0 in every draw; as independent runs, a 0 against a 10
    # comes in 1 draw of 16, and the spread gives Welch's interval at 1 degree of freedom, 0 -+ 12.706 x 5 sqrt(2)
    values = {0: 0.0, 1: 10.0}
    diff = Effect("a - b", ("a", "b"), lambda a, b: a - b, ">", -1.0)
    apart = two_runs(values, dict(values), [diff]).results[0]
    assert apart.interval.estimate == 0 and apart.interval.low < -10 and apart.interval.high > 10
    assert apart.interval.high == pytest.approx(-apart.interval.low) == pytest.approx(12.706 * 5 * 2**0.5, rel=0.03)
    same = Claim("k", "f.png", "paper", "rule", {"a": values, "b": dict(values)}, {"a": "A", "b": "A"}, [diff])
    assert (same.results[0].interval.low, same.results[0].interval.high) == (0.0, 0.0)
    assert same.verdict == HELD and apart.verdict == INCONCLUSIVE


def test_claim_broadcasts_an_unseeded_model_and_reports_nan_as_not_measurable():
    claim = Claim("k", "f.png", "paper", "rule", {"a": {0: 2.0, 1: 0.5}, "base": {None: 1.0}}, {"a": "A"},
                  [Effect("a - base", ("a", "base"), lambda a, base: a - base, ">", 0.0)])
    assert claim.seeds == [0, 1] and claim.means() == {"a": 1.25, "base": 1.0}
    result = claim.results[0]
    # a - base at seeds 0 and 1: 1.0 and -0.5, so 0.25 -+ t_{0.975, 1} x 0.75 = 0.25 -+ 9.53
    assert result.interval.estimate == 0.25 and result.interval.high - 0.25 == pytest.approx(9.53, rel=0.03)
    assert result.interval.low == pytest.approx(0.25 - (result.interval.high - 0.25))
    assert claim.verdict == INCONCLUSIVE and result.seeds == {"A": 2}
    nan = Claim("k", "f.png", "paper", "rule", {"a": {0: math.nan}}, {"a": "A"},
                [Effect("a", ("a",), lambda a: a, ">", 0.0)])
    assert nan.verdict == NOT_MEASURABLE
    one = Claim("k", "f.png", "paper", "rule", {"a": {0: 3.0}}, {"a": "A"},
                [Effect("a", ("a",), lambda a: a, ">", 0.0)])
    assert one.verdict == INCONCLUSIVE and math.isnan(one.seeds_needed)  # one seed: no interval, no spread
    assert "no interval (a run with fewer than 2 seeds)" in "\n".join(claim_markdown(1, one))


def test_report_config_rejects_bad_values():
    with pytest.raises(ConfigError, match=r"^report.last_n: must be >= 1"):
        from_dict(ReportConfig, {"last_n": 0}, "report")
    with pytest.raises(ConfigError, match=r"^report.nope"):
        from_dict(ReportConfig, {"nope": 1}, "report")
    with pytest.raises(ConfigError, match=r"^report.confidence: must be in \(0, 1\)"):
        from_dict(ReportConfig, {"confidence": 1.0}, "report")
    with pytest.raises(ConfigError, match=r"^report.imdb_groups: must not repeat"):
        from_dict(ReportConfig, {"imdb_groups": ["imdb", "imdb"]}, "report")
    cfg = from_dict(ReportConfig, {"imdb_groups": ["imdb", "imdb_smollm2"], "rerun": None}, "report")
    assert cfg.imdb_groups == ("imdb", "imdb_smollm2") and cfg.rerun is None and cfg.min_seeds == 3


# --------------------------------------------------------------------------------------------------------------------
# The report on the fixture
# --------------------------------------------------------------------------------------------------------------------


def test_report_on_fixture_writes_every_figure_and_holds_every_constructed_claim(tmp_path):
    outputs, reports = tmp_path / "outputs", tmp_path / "reports"
    write_fixture(outputs)
    cfg = ReportConfig(deviations={"ppo.batch_size": "128 | not 256: time"}, collapse_kl=10.0)  # the fixture's PPO ends at KL ~15
    experiments = experiments_of(fixture_experiments())
    claims = {c.key: c for c in write_report(outputs, reports, cfg, experiments, None, "fixture")[1]}
    assert {key: c.verdict for key, c in claims.items() if c.verdict != HELD} == {}
    assert all(decided_by_its_intervals(c) for c in claims.values())
    assert claims["pareto"].seeds == [0, 1, 2] and claims["pareto_math"].seeds == [0, 1]  # the math sweep's own seeds
    assert set(claims["pareto_math"].seeds_used.values()) == {2}
    ratio = claims["imdb_kl_ratio"].results[0]
    assert ratio.label == "mean final KL of PPO / CORY-LLM1" and 2.5 < ratio.interval.estimate < 3.5  # 14.99 / 5.06
    assert 2 < ratio.interval.low < ratio.interval.high < 3.5 and ratio.seeds == {"imdb/ppo": 3, "imdb/cory": 3}
    for name in FIGURES:
        assert (reports / f"{name}.png").stat().st_size > 10_000, name
    report = (reports / "REPORT.md").read_text()
    for i, claim in enumerate(claims.values(), 1):
        assert f"### {i}. {claim.paper}" in report
    assert report.count("**Verdict: held**") == len(claims)
    assert "| mean final KL of PPO / CORY-LLM1 | 2.966 [2.764, 3.168] | > 2 | held | 3 per run | 2 | bootstrap | 2 |" \
        in report  # the paper's "more than 2x" beside ours
    assert "| pass@1 PPO | 0.1212 ± 0.0010 (3 seeds) | 0: 0.1200, 1: 0.1212, 2: 0.1224 | 0.145 |" in report
    assert "Fig. 5, GSM8K test, 4-bit Llama-2-7b-chat, read off the authors' figure" in report
    assert "No other run to compare with: reports/fixture/rerun/claims.json does not exist." in report
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
    summary = json.loads((reports / "claims.json").read_text())
    entry = summary["imdb_kl_ratio"]
    assert entry["verdict"] == HELD and entry["means"]["PPO final KL"] == pytest.approx(14.99, abs=0.01)
    assert entry["seeds"] == {"imdb/ppo": 3, "imdb/cory": 3} and entry["seeds_needed"] == 2
    (effect,) = [e for e in entry["effects"] if e["label"].endswith("CORY-LLM1")]
    assert effect["estimate"] == pytest.approx(2.966, abs=1e-3) and effect["op"] == ">" and effect["threshold"] == 2
    assert effect["verdict"] == HELD and len(effect["interval"]) == 2 and effect["method"] == "bootstrap"
    assert summary["passk"]["paper_values"]["pass@1 PPO"] == {"value": 0.145, "source": PAPER_PASSK_SOURCE}
    assert summary["imdb_kl_ratio"]["paper_values"]["PPO final KL"]["value"] == [28.0, 37.0]
    assert summary["imdb_combined_fall"]["effects"][0]["estimate"] == "inf"  # CORY's combined reward rises here


PAPER_PASSK_SOURCE = "Fig. 5, GSM8K test, 4-bit Llama-2-7b-chat, read off the authors' figure"


def test_kl_ratio_verdict_follows_the_fixture_numbers(tmp_path):
    write_fixture(tmp_path / "low", cory_kl=10.0)  # PPO KL ~14.7 / CORY ~9.9 = 1.5 on every seed
    claim = claims_by_key(tmp_path / "low")["imdb_kl_ratio"]
    assert claim.verdict == NOT_HELD and claim.results[0].interval.high < 2
    write_fixture(tmp_path / "mixed", cory_kl={0: 5.0, 1: 5.0, 2: 10.0})  # seed 2 alone falls under 2x
    claim = claims_by_key(tmp_path / "mixed")["imdb_kl_ratio"]
    low, high = claim.results[0].interval.low, claim.results[0].interval.high
    assert claim.verdict == INCONCLUSIVE and low < 2 < high and claim.results[0].interval.estimate > 2
    # CORY's resample is seed 2 thrice (KL 10.4) in 1 draw of 27 and seed 0 thrice (4.956) in another, so the draws
    # reach PPO's resampled mean (14.70 to 15.29) over those; Student's t on the draws' spread reaches further
    assert low <= 15.29 / 10.40 and high >= 14.70 / 4.956
    assert low == 0.0  # Student's interval would reach below 0, where no ratio of two KLs lies
    assert high - claim.results[0].interval.estimate == pytest.approx(
        student_half_width(claim.results[0].interval.se, 3, 0.95))
    assert (f"- **Verdict: inconclusive** (95% intervals; mean final KL of PPO / CORY-LLM1: [{low:.4g}, "
            f"{high:.4g}] contains 2;") in "\n".join(claim_markdown(1, claim))
    assert claim.seeds_needed > 3  # the spread needs more seeds than 3 to decide


def test_one_seed_and_few_iterations_give_numbers_for_every_claim(tmp_path):
    write_fixture(tmp_path, seeds=(0,), iterations=3)
    claims = claims_by_key(tmp_path, seeds=[0])
    assert claims["imdb_kl_ratio"].seeds == [0]
    assert all(c.verdict in (INCONCLUSIVE, NOT_MEASURABLE) for c in claims.values())  # one seed: no interval
    assert claims["imdb_kl_ratio"].results[0].interval.estimate > 0
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
    monkeypatch.setattr(pipeline.report, "changed", lambda: {})  # no params.yaml or profiles/ in tmp_path
    pipeline.report.main()
    reports = tmp_path / "reports" / "fixture"
    for name in FIGURES:
        assert (reports / f"{name}.png").stat().st_size > 5_000, name
    assert "(1 seed)" in (reports / "REPORT.md").read_text()
    timing = json.loads((tmp_path / "outputs" / "fixture" / "metrics" / "timing" / "report.json").read_text())
    assert timing["stage"] == "report"
    # DVC's views, at the project root whatever the profile: the six numbers and a copy of every figure
    assert sorted(p.stem for p in (tmp_path / "metrics" / "figures").glob("*.png")) == sorted(FIGURES)
    assert len(json.loads((tmp_path / "metrics" / "headline.json").read_text())["imdb"]["cory"]) == 2


def test_each_tasks_frontier_is_judged_on_its_own_sweep(tmp_path):
    write_fixture(tmp_path, math_cory_gain=-0.2)  # on math, CORY's share correct is 0.2 below PPO's at every eta
    claims = claims_by_key(tmp_path)
    assert claims["pareto"].verdict == HELD and claims["pareto_math"].verdict == NOT_HELD
    assert [(r.interval.estimate, r.interval.high) for r in claims["pareto_math"].results] == [(0.0, 0.0)] * 2
    assert claims["pareto_math"].figure == "fig2c_pareto_math.png" and claims["pareto"].figure == "fig2c_pareto.png"
    assert "CORY-LLM1 η=0.1 final KL" in claims["pareto_math"].quantities
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
    entry = json.loads((reports / "claims.json").read_text())["pareto_math"]
    assert (entry["verdict"], entry["means"], entry["effects"], entry["seeds_needed"]) == (NOT_MEASURABLE, {}, [], None)


def test_claim_without_common_seeds_is_not_measurable():
    # one run whose two quantities share no seed: nothing to pair within the run
    claim = Claim("k", "f.png", "paper", "rule", {"a": {0: 1.0}, "b": {1: 2.0}, "c": {}}, {"a": "A", "b": "A"},
                  [Effect("a - b", ("a", "b"), lambda a, b: a - b, "<", 0.0)])
    assert claim.seeds == [0, 1] and claim.verdict == NOT_MEASURABLE and claim.results[0].seeds == {"A": 0}
    assert "n/a" in "\n".join(claim_markdown(1, claim))
