import json
import math
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import ttest_ind

from cory.report.claims import (
    HELD,
    INCONCLUSIVE,
    NOT_HELD,
    NOT_MEASURABLE,
    NOT_TESTED,
    Claim,
    Effect,
    curve_gap,
    late_slope,
    max_drawdown,
    peak,
    reach_iteration,
)
from cory.schema import ConfigError, from_dict
from cory.report.markdown import glossary_markdown
from cory.report.config import ReportConfig
from cory.report.markdown import claim_markdown
from cory.report.report import write_report
from cory.report.stats import t_quantile
from cory.report.verdicts import every_one

from report_fixtures import (FIGURES, MECHANISM, claims_by_key, decided_by_its_intervals, experiments_of,
                             fixture_experiments, load_fixture, write_fixture)


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


def two_runs(a: dict, b: dict, effects, tested=True, same_run=False) -> Claim:
    """A claim on quantity a of run A and b of run B (or both of run A)."""
    return Claim("k", "f.png", "paper", "rule", {"a": a, "b": b}, {"a": "A", "b": "A" if same_run else "B"}, effects,
                 tested=tested)


def test_statements_combine_into_the_claims_verdict():
    clear = Effect("a", ("a",), (1.0,), magnitude="a above 1", op=">", threshold=1.0)
    straddles = Effect("b", ("b",), (1.0,), magnitude="b above 1", op=">", threshold=1.0)
    fails = Effect("b", ("b",), (1.0,), magnitude="b above 5", op=">", threshold=5.0)
    a, b = {0: 2.0, 1: 2.5, 2: 3.0}, {0: 0.5, 1: 1.5, 2: 2.5}
    assert two_runs(a, b, [clear]).verdict == HELD
    assert two_runs(a, b, [clear, straddles]).verdict == INCONCLUSIVE
    assert two_runs(a, b, [clear, straddles, fails]).verdict == NOT_HELD
    claim = two_runs(a, b, [clear, straddles, fails], tested=False)
    assert claim.verdict == NOT_TESTED and claim.measured_verdict == NOT_HELD
    assert [r.verdict for r in claim.results] == [HELD, INCONCLUSIVE, NOT_HELD] and decided_by_its_intervals(claim)
    # seeds needed: with a statement on the wrong side, the fewest that one needs decides the claim
    assert two_runs(a, b, [clear, fails]).seeds_needed == claim.results[2].seeds_needed
    assert two_runs(a, b, [clear, straddles]).seeds_needed == max(claim.results[0].seeds_needed,
                                                                  claim.results[1].seeds_needed)
    assert claim.decide is every_one


def test_arms_that_share_seeds_pair_and_others_do_not():
    # A and B alike seed by seed: paired, a - b is 0 on every seed and the interval a point
    values = {0: 0.0, 1: 10.0}
    diff = Effect("a - b", ("a", "b"), magnitude="a above b - 1", op=">", threshold=-1.0)
    paired = two_runs(values, dict(values), [diff]).results[0]
    assert (paired.interval.low, paired.interval.high) == (0.0, 0.0) and paired.method.startswith("paired by seed")
    # B on other seeds: Welch's interval, as scipy gives it (df (25 + 25)^2 / (25^2 + 25^2) = 2)
    apart = two_runs(values, {2: 0.0, 3: 10.0}, [diff]).results[0]
    welch = ttest_ind([0.0, 10.0], [0.0, 10.0], equal_var=False).confidence_interval(0.95)
    assert (apart.interval.low, apart.interval.high) == pytest.approx((welch.low, welch.high))
    assert apart.interval.high == pytest.approx(t_quantile(0.975, 2) * 50**0.5) and "Welch t (df 2)" in apart.method
    # two quantities of one run always pair
    same = two_runs(values, dict(values), [diff], same_run=True).results[0]
    assert (same.interval.low, same.interval.high) == (0.0, 0.0)


def test_claim_broadcasts_an_unseeded_model_and_reports_nan_as_not_measurable():
    claim = Claim("k", "f.png", "paper", "rule", {"a": {0: 2.0, 1: 0.5}, "base": {None: 1.0}}, {"a": "A"},
                  [Effect("a - base", ("a", "base"), magnitude="a above base", op=">", threshold=0.0)])
    assert claim.seeds == [0, 1] and claim.means() == {"a": 1.25, "base": 1.0}
    result = claim.results[0]
    # a - base at seeds 0 and 1: 1.0 and -0.5, so 0.25 -+ t_{0.975, 1} x 0.75 = 0.25 -+ 9.53
    assert result.interval.estimate == 0.25 and result.interval.high - 0.25 == pytest.approx(9.53, rel=1e-3)
    assert result.interval.low == pytest.approx(0.25 - (result.interval.high - 0.25))
    assert claim.verdict == INCONCLUSIVE and result.seeds == {"A": 2}
    # its direction against the constant: a's values less it, by the signed-rank test (2 seeds: p >= 1/4)
    direction = Claim("k", "f.png", "paper", "rule", {"a": {0: 2.0, 1: 1.5}, "base": {None: 1.0}}, {"a": "A"},
                      [Effect("a - base", ("a", "base"), direction="a above base")]).results[0]
    assert (direction.p, direction.smallest_p, direction.verdict) == (0.25, 0.25, INCONCLUSIVE)
    nan = Claim("k", "f.png", "paper", "rule", {"a": {0: math.nan}}, {"a": "A"},
                [Effect("a", ("a",), (1.0,), magnitude="a above 0")])
    assert nan.verdict == NOT_MEASURABLE
    one = Claim("k", "f.png", "paper", "rule", {"a": {0: 3.0}}, {"a": "A"},
                [Effect("a", ("a",), (1.0,), magnitude="a above 0")])
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
    with pytest.raises(ConfigError, match=r"^report.collapse.distinct_2: must be in \(0, 1\), got 1.5$"):
        from_dict(ReportConfig, {"collapse": {"distinct_2": 1.5}}, "report")
    rule = {"group": "g", "frontier": ["ppo", "ppo"], "cory": ["cory"]}
    with pytest.raises(ConfigError, match=r"^report.mechanism.frontier: PPO's frontier needs runs at two or more KL "
                                          r"coefficients, got \['ppo', 'ppo'\]$"):
        from_dict(ReportConfig, {"mechanism": rule}, "report")
    with pytest.raises(ConfigError, match=r"^report.mechanism.margin: must be > 0, got 0.0$"):
        from_dict(ReportConfig, {"mechanism": {**rule, "frontier": ["a", "b"], "margin": 0.0}}, "report")
    with pytest.raises(ConfigError, match=r"^report.mechanism: required setting\(s\) missing: cory$"):
        from_dict(ReportConfig, {"mechanism": {"group": "g", "frontier": ["a", "b"]}}, "report")
    cfg = from_dict(ReportConfig, {"imdb_groups": ["imdb", "imdb_smollm2"], "rerun": None}, "report")
    assert cfg.imdb_groups == ("imdb", "imdb_smollm2") and cfg.rerun is None and cfg.min_seeds == 3
    assert cfg.mechanism is None and cfg.passk_max_k == 5


# --------------------------------------------------------------------------------------------------------------------
# The report on the fixture
# --------------------------------------------------------------------------------------------------------------------

SIX = tuple(range(6))
"""Seeds at which a rank test can decide (1/64 < 0.025); 3 pairs cannot (1/8)."""


def test_report_on_fixture_writes_every_figure_and_holds_every_constructed_claim(tmp_path):
    outputs, reports = tmp_path / "outputs", tmp_path / "reports"
    write_fixture(outputs, seeds=SIX, math_sweep_seeds=SIX, mechanism="above")
    cfg = ReportConfig(deviations={"ppo.batch_size": "128 | not 256: time"}, mechanism=MECHANISM)
    experiments = experiments_of(fixture_experiments(seeds=SIX, math_sweep_seeds=SIX, mechanism=True))
    claims = {c.key: c for c in write_report(outputs, reports, cfg, experiments, None, "fixture")[1]}
    assert {key: c.verdict for key, c in claims.items() if c.verdict != HELD} == {}
    assert all(decided_by_its_intervals(c) for c in claims.values())
    assert set(claims["pareto_math"].seeds_used.values()) == {6}
    kl = claims["imdb_kl_ratio"].results
    assert [r.kind for r in kl] == ["direction", "magnitude"] * 2 and kl[0].label == "PPO / CORY-LLM1 final KL"
    assert kl[0].p == kl[0].smallest_p == 1 / 64 and kl[0].method == "signed-rank, exact"
    assert 2 < kl[1].interval.low < kl[1].interval.estimate < kl[1].interval.high < 3.5
    assert kl[1].method.startswith("log-scale paired by seed t") and kl[1].seeds == {"imdb/ppo": 6, "imdb/cory": 6}
    for name in (*FIGURES, "fig_frontier_imdb_smollm2"):
        assert (reports / f"{name}.png").stat().st_size > 10_000, name
    report = (reports / "REPORT.md").read_text()
    lines = report.splitlines()
    assert lines[0] == "# CORY reproduction report (profile `fixture`)"
    assert lines[2].startswith("- **Does CORY beat PPO on the pretrained LM, smollm2 (135M, pretrained) in group "
                               "`imdb_smollm2`?** "
                               "Yes (held)")
    answer = lines[2:lines.index("", 2)]
    assert 5 <= len(answer) <= 8 and answer[-1].startswith(f"- Verdicts of the {len(claims)} claims: "
                                                           f"{len(claims)} held.")
    assert any(line.startswith("- Task reward at matched KL, CORY's pioneer - other") for line in answer)
    assert any(line.startswith("- Without knowledge transfer (cory_no_kt)") and "cooperation" in line for line in answer)
    assert lines.index("## Claims") < lines.index("## How the claims are judged") < lines.index("## This run")
    for i, claim in enumerate(claims.values(), 1):
        assert f"### {i}. {claim.paper}" in report
    assert report.count("**Verdict: held**") == len(claims)
    assert ("| PPO's final KL is more than 2x CORY-LLM1's | PPO / CORY-LLM1 final KL | "
            f"{kl[1].interval.estimate:.4g} [{kl[1].interval.low:.4g}, {kl[1].interval.high:.4g}] | "
            "log-scale paired by seed t (df 5) | - | held | 6 per run |") in report
    assert "| pass@1 PPO | 0.1230 ± 0.0020 (6 seeds) |" in report and "| 0.145 |" in report
    assert "Fig. 5, GSM8K test, 4-bit Llama-2-7b-chat, read off the authors' figure" in report
    assert "No other run to compare with: reports/fixture/rerun/claims.json does not exist." in report
    assert "| `ppo.batch_size` | 128 \\| not 256: time |" in report
    assert "29,000,000" in report and "ppo.init_kl_coef" in report
    assert "peak GPU memory of the stage's own process (GiB)" in report
    for name in FIGURES:
        assert f"({name}.png)" in report
    assert (reports / "METRICS.md").read_text() == glossary_markdown()
    samples = (reports / "samples.md").read_text()
    assert "This is one of Jackies" in samples and "llm1 says \\| good" in samples
    summary = json.loads((reports / "claims.json").read_text())
    entry = summary["imdb_kl_ratio"]
    assert entry["verdict"] == HELD and entry["seeds"] == {"imdb/ppo": 6, "imdb/cory": 6}
    (effect,) = [e for e in entry["effects"] if e["statement"] == "PPO's final KL is more than 2x CORY-LLM1's"]
    assert effect["estimate"] == pytest.approx(kl[1].interval.estimate) and effect["op"] == ">"
    assert effect["threshold"] == 2 and effect["verdict"] == HELD and effect["kind"] == "magnitude"
    assert summary["passk"]["paper_values"]["pass@1 PPO"] == {"value": 0.145, "source": PAPER_PASSK_SOURCE}
    assert summary["imdb_kl_ratio"]["paper_values"]["PPO final KL"]["value"] == [28.0, 37.0]


PAPER_PASSK_SOURCE = "Fig. 5, GSM8K test, 4-bit Llama-2-7b-chat, read off the authors' figure"


def test_kl_ratio_verdict_follows_the_fixture_numbers(tmp_path):
    write_fixture(tmp_path / "low", seeds=SIX, cory_kl=10.0)  # PPO KL ~14.7 / CORY ~9.9 = 1.5 on every seed
    claim = claims_by_key(tmp_path / "low")["imdb_kl_ratio"]
    direction, size = claim.results[:2]
    assert (direction.verdict, size.verdict, claim.verdict) == (HELD, NOT_HELD, NOT_HELD)  # lower, not 2x lower
    assert size.interval.high < 2 and "CORY-LLM1's final KL is lower than PPO's: held" in claim_markdown(1, claim)[5]
    write_fixture(tmp_path / "mixed", cory_kl={0: 5.0, 1: 5.0, 2: 10.0})  # seed 2 alone falls under 2x
    claim = claims_by_key(tmp_path / "mixed")["imdb_kl_ratio"]
    direction, size = claim.results[:2]
    assert claim.verdict == INCONCLUSIVE and size.interval.low < 2 < size.interval.high
    assert direction.verdict == INCONCLUSIVE and direction.smallest_p == 1 / 8  # 3 pairs cannot decide a direction
    assert "smallest possible 0.12; these seeds cannot reach 0.025" in claim_markdown(1, claim)[5]
    assert 0 < size.interval.low  # a log-scale interval: a ratio of two KLs never reaches below 0
    assert claim.seeds_needed > 3  # the spread needs more seeds than 3 to decide


def test_one_seed_and_few_iterations_give_numbers_for_every_claim(tmp_path):
    write_fixture(tmp_path, seeds=(0,), iterations=3)
    claims = claims_by_key(tmp_path, seeds=[0])
    assert claims["imdb_kl_ratio"].seeds == [0]
    # one seed: no interval; the claims of runs the fixture's params lack (the mechanism's) are not tested
    assert all(c.verdict in (INCONCLUSIVE, NOT_MEASURABLE) for c in claims.values() if not c.absent)
    assert [c.key for c in claims.values() if c.absent] == ["mechanism"]
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
    # on math, CORY's share correct is 0.2 below PPO's at every eta: below PPO's path at matched KL
    write_fixture(tmp_path, seeds=SIX, math_sweep_seeds=SIX, math_cory_gain=-0.2)
    claims = claims_by_key(tmp_path, experiments={"math_sweep_seeds": SIX})
    assert claims["pareto"].verdict == HELD and claims["pareto_math"].verdict == NOT_HELD
    below = [r for r in claims["pareto_math"].results if r.kind == "magnitude"]
    assert below and all(r.verdict == NOT_HELD and r.interval.high < r.threshold for r in below)
    assert claims["pareto_math"].figure == "fig2c_pareto_math.png" and claims["pareto"].figure == "fig2c_pareto.png"
    assert "cory_eta0.1 reward at matched KL (cory_eta0.1 vs ppo_eta0.1)" in claims["pareto_math"].quantities
    assert "group `pareto_math`" in claims["pareto_math"].rule and "group `pareto`" in claims["pareto"].rule
    assert "cory_eta0.3 vs ppo_eta0.01: no KL level both cross; not compared." in claims["pareto"].notes


@pytest.mark.parametrize("sweeps", [("imdb",), ()])
def test_a_profile_without_a_sweep_or_a_run_says_which_claims_it_does_not_test(tmp_path, sweeps):
    outputs, reports = tmp_path / "outputs", tmp_path / "reports"
    write_fixture(outputs, seeds=(0, 1), iterations=6, skip=("pareto_math", "pareto", "imdb/cory_no_kt",
                                                               "imdb/cory_competitive"))
    if "imdb" in sweeps:
        write_fixture(tmp_path / "with_imdb", seeds=(0, 1), iterations=6)
        shutil.copytree(tmp_path / "with_imdb" / "runs" / "pareto", outputs / "runs" / "pareto")
    raw = fixture_experiments(seeds=(0, 1), sweeps=sweeps)
    for name in ("cory_no_kt", "cory_competitive"):  # the scratch ablations moved out of the profile
        del raw["imdb"]["runs"][name]
    claims = {c.key: c for c in write_report(outputs, reports, ReportConfig(), experiments_of(raw), None,
                                             "fixture")[1]}
    assert claims["pareto_math"].verdict == NOT_TESTED and claims["pareto_math"].figure == ""
    assert (claims["pareto"].verdict == NOT_TESTED) == ("imdb" not in sweeps)
    absent = {key: c.absent for key, c in claims.items() if c.absent}
    assert absent["no_kt_kl"] == absent["no_kt_unstable"] == "the group has no run cory_no_kt"
    assert absent["coop_kl"] == "the group has no run cory_competitive" and "no_rex_kl" not in absent
    assert absent["pareto_math"].startswith("no experiment group sweeps the KL coefficient of task 'math'")
    assert not (reports / "fig2c_pareto_math.png").exists() and not (reports / "fig_coop_vs_comp.png").exists()
    assert (reports / "fig2c_pareto.png").exists() == ("imdb" in sweeps)
    assert (reports / "fig6_ablations.png").exists()  # the run without role exchange is still there
    report = (reports / "REPORT.md").read_text()
    assert "No Pareto sweep of task `math`: no experiment group has task math and a sweep_eta." in report
    assert "- **Verdict: not tested** in this profile: the group has no run cory_no_kt." in report
    assert "| **not tested** | not tested in this profile: the group has no run cory_competitive |" in report
    entry = json.loads((reports / "claims.json").read_text())["pareto_math"]
    assert (entry["verdict"], entry["means"], entry["effects"], entry["seeds_needed"]) == (NOT_TESTED, {}, [], None)
    assert entry["not_tested_because"] == absent["pareto_math"]


def test_claim_without_common_seeds_is_not_measurable():
    # one run whose two quantities share no seed: nothing to pair within the run
    claim = Claim("k", "f.png", "paper", "rule", {"a": {0: 1.0}, "b": {1: 2.0}, "c": {}}, {"a": "A", "b": "A"},
                  [Effect("a - b", ("a", "b"), direction="a below b", op="<")])
    assert claim.seeds == [0, 1] and claim.verdict == NOT_MEASURABLE and claim.results[0].seeds == {"A": 0}
    assert "n/a" in "\n".join(claim_markdown(1, claim))
