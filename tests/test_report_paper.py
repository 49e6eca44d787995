"""The claims the paper's IMDB result is about: PPO's collapse and CORY's, the combined reward's fall, one claim set per
IMDB group, profiles that test no claim, and a rerun compared claim by claim."""

import json
import re

import numpy as np
import pytest

from cory.report.claims import HELD, INCONCLUSIVE, NOT_HELD, NOT_TESTED, Context, RateDifference, combined_fall_claim
from cory.report.config import ReportConfig
from cory.report.markdown import claim_markdown, rerun_rows, summary_json
from cory.report.report import write_report

from report_fixtures import (claims_by_key, copy_imdb_group, experiments_of, fixture_experiments, load_fixture, run_of,
                             write_fixture)


# --------------------------------------------------------------------------------------------------------------------
# The claims the paper's IMDB result is about, several IMDB groups, untested profiles, reruns
# --------------------------------------------------------------------------------------------------------------------


SIX = tuple(range(6))


def test_collapse_is_read_from_behaviour_with_each_methods_own_rate(tmp_path):
    # the fixture's distinct-2 falls as 0.9 exp(-KL / 10): PPO (KL ~15) ends below half its start, CORY (KL ~5) not
    write_fixture(tmp_path / "plain", seeds=SIX)
    claim = claims_by_key(tmp_path / "plain")["imdb_collapse"]
    assert claim.verdict == HELD  # 6 of 6 (Clopper-Pearson [0.54, 1] above 1/2) against 0 of 6 ([0, 0.46])
    assert [(r.kind, r.verdict) for r in claim.results] == [("rate", HELD)] * 5
    assert [r.statement for r in claim.results[:3]] == [
        "PPO collapses: its rate of degenerate seeds is above 0.5", "CORY-LLM1 does not: its rate is below 0.5",
        "PPO's rate is above CORY-LLM1's"]
    assert claim.results[0].interval.low == pytest.approx(0.025 ** (1 / 6)) and claim.results[0].method == \
        "Clopper-Pearson, 6 of 6"
    assert isinstance(claim.effects[2], RateDifference) and claim.results[2].method == "exact unconditional"
    assert claim.notes[0].startswith("diversity lost (final distinct-2 / iteration 0's < 0.5): PPO 6 of 6 [0.54, "
                                     "1.00]; CORY-LLM1 0 of 6 [0.00, 0.46]")
    assert claim.notes[4].startswith("KL above report.collapse_kl (final KL (as pioneer) > 20): PPO 0 of 6")
    assert claim.notes[-1].startswith("Calibration target (PPO's final KL >= 10 on every seed") and ": met." in \
        claim.notes[-1]
    # the KL is shown, not counted: a cut-off below every method's KL makes no seed degenerate
    claim = claims_by_key(tmp_path / "plain", collapse_kl=1.0)["imdb_collapse"]
    assert claim.verdict == HELD and "CORY-LLM1 6 of 6" in claim.notes[4]
    # CORY-LLM1's last answers leak a chat-template token: CORY collapses too, on 6 of 6 seeds
    write_fixture(tmp_path / "leak", seeds=SIX, leak=("imdb/cory",))
    claim = claims_by_key(tmp_path / "leak")["imdb_collapse"]
    assert claim.verdict == NOT_HELD and claim.results[1].verdict == NOT_HELD  # [0.54, 1] lies above 1/2
    assert claim.notes[3].startswith("template leakage (share of end answers with a template token >= 0.05): PPO 0 of "
                                     "6 [0.00, 0.46]; CORY-LLM1 6 of 6")
    # three seeds decide neither own rate: 3 of 3 gives [0.29, 1]
    write_fixture(tmp_path / "three")
    claim = claims_by_key(tmp_path / "three")["imdb_collapse"]
    assert claim.verdict == INCONCLUSIVE and claim.results[0].seeds_needed == 6


def test_combined_reward_falls_less_for_cory_as_the_paper_reads_it():
    t = np.arange(100, dtype=float)

    def combined(end: float, seed: int) -> np.ndarray:  # +0.45 for 10 iterations, then linearly to `end`
        return np.where(t < 10, 0.45, 0.45 + (end - 0.45) * (t - 10) / 89) + 0.01 * seed * t / 99

    ppo = run_of({s: {"llm1/combined_reward": combined(-8.7, s)} for s in SIX}, {"ppo": {"init_kl_coef": 0.3}},
                 "imdb/ppo")
    cory = run_of({s: {"llm1/combined_reward": combined(-1.1, s), "llm2/combined_reward": combined(-1.3, s)}
                   for s in SIX}, {"ppo": {"init_kl_coef": 0.3}}, "imdb/cory")
    claim = combined_fall_claim(ppo, cory, None, Context(ReportConfig()))
    # the last 10 iterations' mean lies (0.45 - end) x 84.5 / 89 below the start (the first 10 iterations' mean)
    assert claim.means()["CORY-LLM1 fall (start - final)"] == pytest.approx((0.45 + 1.1) * 84.5 / 89, abs=0.03)
    direction, size = claim.results[:2]
    assert (direction.kind, direction.verdict, direction.p) == ("direction", HELD, 1 / 64)
    # the ratio as a contrast: PPO's fall - 2 x CORY's, (9.15 - 2 x 1.55) x 84.5 / 89 = 5.74, no division by a fall
    assert size.label == "PPO's fall - 2 x CORY-LLM1's" and size.interval.estimate == pytest.approx(5.74, abs=0.03)
    assert claim.verdict == HELD and claim.paper_values["PPO's fall / CORY-LLM1's fall"].value == 5.9
    assert "PPO's fall - 2 x CORY-LLMx's > 0" in claim.rule
    text = "\n".join(claim_markdown(1, claim))
    assert "| PPO final combined reward |" in text and "| -8.7 |" in text and "PPO-GPT-2-l at iteration ~100" in text
    # a CORY whose combined reward rises: its fall is negative, and the contrast simply grows
    rising = run_of({s: {"llm1/combined_reward": combined(2.0, s), "llm2/combined_reward": combined(2.0, s)}
                     for s in SIX}, {"ppo": {"init_kl_coef": 0.3}}, "imdb/cory")
    assert combined_fall_claim(ppo, rising, None, Context(ReportConfig())).verdict == HELD


def test_each_imdb_group_gets_its_own_claims(tmp_path):
    write_fixture(tmp_path)
    runs = ("ppo", "cory", "cory_no_kt")
    copy_imdb_group(tmp_path, "imdb_smollm2", runs)
    claims = claims_by_key(tmp_path, experiments={"extra_imdb": {"imdb_smollm2": runs}},
                           imdb_groups=("imdb", "imdb_smollm2"))
    assert claims["imdb_smollm2/imdb_kl_ratio"].paper.startswith("smollm2 (135M, pretrained): PPO's final KL")
    assert claims["imdb_kl_ratio"].paper.startswith("imdb_small (29M, from scratch): PPO's final KL")
    assert [(r.interval, r.verdict) for r in claims["imdb_smollm2/imdb_kl_ratio"].results] == [
        (r.interval, r.verdict) for r in claims["imdb_kl_ratio"].results]  # the same runs
    assert claims["imdb_smollm2/imdb_kl_ratio"].figure == "fig3_imdb_smollm2.png"  # its own Fig. 3
    assert claims["imdb_kl_ratio"].figure == "fig3_imdb.png"
    assert claims["imdb_smollm2/no_kt_kl"].figure == "fig6_ablations_imdb_smollm2.png"  # its own Fig. 6
    assert claims["imdb_smollm2/imdb_2x_model"].figure == ""  # not tested: no figure
    smollm2 = {key.split("/", 1)[1]: c for key, c in claims.items() if key.startswith("imdb_smollm2/")}
    assert set(smollm2) == {"imdb_similar_reward", "imdb_kl_ratio", "imdb_llms_coincide", "imdb_combined_reward",
                            "imdb_combined_fall", "imdb_collapse", "imdb_2x_model", "no_kt_kl", "no_kt_unstable",
                            "no_rex_kl", "no_rex_observer", "coop_task_reward", "coop_kl"}
    assert {key for key, c in smollm2.items() if c.absent} == {"imdb_2x_model", "no_rex_kl", "no_rex_observer",
                                                              "coop_task_reward", "coop_kl"}  # runs it lacks
    assert list(claims).index("imdb_smollm2/imdb_collapse") < list(claims).index("math_ppo_peak")
    alone = claims_by_key(tmp_path, experiments={"extra_imdb": {"imdb_smollm2": runs}}, imdb_groups=("imdb_smollm2",))
    assert "imdb_kl_ratio" not in alone and "coop_kl" not in alone and "imdb_smollm2/no_kt_kl" in alone
    assert claims_by_key(tmp_path)["imdb_kl_ratio"].paper == "PPO's final KL is more than 2x CORY's (Fig. 3b)."
    from cory.report.figures import draw_figures

    inputs = load_fixture(tmp_path, None, ("imdb", "imdb_smollm2"), extra_imdb={"imdb_smollm2": runs})
    figures = draw_figures(inputs, ReportConfig(imdb_groups=("imdb", "imdb_smollm2")))
    assert "fig3_imdb_smollm2" in figures and "smollm2 (135M, pretrained)" in figures["fig3_imdb_smollm2"].caption
    assert "fig6_ablations_imdb_smollm2" in figures and "fig_coop_vs_comp_imdb_smollm2" not in figures


def test_a_profile_that_tests_no_claim_shows_numbers_without_verdicts(tmp_path):
    outputs, reports = tmp_path / "outputs", tmp_path / "reports" / "fixture"
    write_fixture(outputs, seeds=(0,), iterations=4)
    cfg = ReportConfig(test_claims=False)
    _, claims = write_report(outputs, reports, cfg, experiments_of(fixture_experiments(seeds=(0,))), None, "fixture")
    assert {c.verdict for c in claims} == {NOT_TESTED}
    report = (reports / "REPORT.md").read_text()
    # said first: the title says what the profile is, then the line under it
    assert report.split("\n")[0] == ("# CORY reproduction report (profile `fixture`): a check that the pipeline runs; "
                                     "it tests no claim")
    assert report.split("\n")[2].startswith("**This profile tests no claim of the paper** (params "
                                             "`report.test_claims: false`")
    judged = [c for c in claims if not c.absent]
    assert report.count("- **Verdict: not tested**: this profile tests no claim") == len(judged)
    for word in (HELD, NOT_HELD, INCONCLUSIVE):  # no claim gets one, and the verdict rules that name them are left out
        assert f"**{word}**" not in report and f"| {word} |" not in report and f"Verdict: {word}" not in report
    assert "did not hold" not in report and not re.search(r"\bheld\b(?!-out)", report)
    assert "| PPO final KL |" in report and "(1 seed)" in report  # the numbers are still there
    assert f"- {len(claims)} claims, none judged in this profile." in report
    summary = json.loads((reports / "claims.json").read_text())
    assert {e["verdict"] for entry in summary.values() for e in entry["effects"]} == {NOT_TESTED}
    assert {entry["verdict"] for entry in summary.values()} == {NOT_TESTED}


def test_a_rerun_is_compared_claim_by_claim(tmp_path):
    outputs, root = tmp_path / "outputs", tmp_path / "repo"
    reports = root / "reports" / "fixture"
    write_fixture(outputs, cory_kl={0: 5.0, 1: 5.0, 2: 10.0})
    experiments = experiments_of(fixture_experiments())
    _, claims = write_report(outputs, reports, ReportConfig(rerun=None), experiments, None, "fixture")
    assert "## Rerun" not in (reports / "REPORT.md").read_text()  # null: no comparison
    ours = summary_json(claims)
    theirs = json.loads(json.dumps(ours))
    theirs["imdb_kl_ratio"]["verdict"] = HELD  # as if the rerun's seeds had cleared 2
    for effect in theirs["imdb_kl_ratio"]["effects"]:
        effect["verdict"] = effect["measured_verdict"] = HELD
        effect["interval"] = [2.1, 3.0]
    theirs["old_claim"] = {"verdict": "mixed", "means": {}}  # a claim the rerun had and this run has not
    (reports / "rerun").mkdir(parents=True)
    (reports / "rerun" / "claims.json").write_text(json.dumps(theirs))
    write_report(outputs, reports, ReportConfig(), experiments, None, "fixture")
    report = (reports / "REPORT.md").read_text()
    assert (f"This run's verdicts against those of reports/fixture/rerun/claims.json: {len(ours) - 1} of the "
            f"{len(ours)} claims both runs scored agree (1 in one of them only).") in report
    row = next(line for line in report.splitlines() if line.startswith("| `imdb_kl_ratio` |"))
    ours_kl = ours["imdb_kl_ratio"]["effects"][1]
    assert row.startswith("| `imdb_kl_ratio` | inconclusive | held | **no** | PPO / CORY-LLM1 final KL: "
                          f"{ours_kl['estimate']:.4g} [{ours_kl['interval'][0]:.4g}, {ours_kl['interval'][1]:.4g}];")
    assert "PPO's final KL is more than 2x CORY-LLM1's: inconclusive here, held there (threshold > 2)" in row
    assert "[2.1, 3]" in row
    rows = {r[0]: r for r in rerun_rows(ours, theirs)}
    assert rows["`old_claim`"][1:4] == ["-", "mixed", "-"] and rows["`old_claim`"][-1] == "only in the rerun"
    # a rerun that ended early: its claims.json lacks a claim this run has
    partial = {key: entry for key, entry in ours.items() if key != "passk"}
    row = {r[0]: r for r in rerun_rows(ours, partial)}["`passk`"]
    assert row[2:4] == ["-", "-"] and row[5] == "-" and row[-1] == "only in this run"
    assert rows["`passk`"][3] == "yes" and rows["`passk`"][-1] == ""
    old = rerun_rows(ours, {"imdb_kl_ratio": {"verdict": "mixed", "means": {}}})
    assert "an older report" in {r[0]: r for r in old}["`imdb_kl_ratio`"][-1]


def test_runs_without_a_report_are_scored_by_the_reports_rules(tmp_path, capsys):
    """tools/score_runs.py: the claims of the groups whose runs finished, with the report's verdicts; a group with a
    run stopped early (fewer iterations) is left out, not compared at another iteration."""
    import pandas as pd

    from cory.report.config import ReportConfig
    from tools.score_runs import score

    write_fixture(tmp_path)
    experiments = experiments_of(fixture_experiments())
    reported = {key: c.verdict for key, c in claims_by_key(tmp_path).items()}
    scored = {c.key: c.verdict for c in score(tmp_path, ["imdb", "pareto"], experiments, [0, 1, 2], ReportConfig())}
    assert "imdb_kl_ratio" in scored and "pareto" in scored and "passk" not in scored
    assert all(scored[key] == reported[key] for key in scored)
    history = tmp_path / "runs" / "imdb" / "cory" / "seed0" / "history.csv"
    pd.read_csv(history).head(20).to_csv(history, index=False)  # seed 0 stopped early
    assert not any(c.key.startswith("imdb") for c in score(tmp_path, ["imdb"], experiments, [0, 1, 2], ReportConfig()))
    assert "runs of unequal length" in capsys.readouterr().err


def _params_for_main(monkeypatch, experiments):
    """tools/score_runs.main's load_params() answering the fixture's groups with the report's default settings."""
    from types import SimpleNamespace

    params = SimpleNamespace(report=ReportConfig(), seeds=[0, 1, 2], experiments=experiments)
    monkeypatch.setattr("pipeline.params.load_params", lambda: params)


def test_score_runs_writes_the_claims_it_scored_for_a_report_to_compare(tmp_path, monkeypatch, capsys):
    """A train stage stopped in a sweep: the sweep's claim is left out (not an error), and --claims-json writes the
    other claims in claims.json's form, which the report's rerun comparison reads."""
    import shutil

    import tools.score_runs as score_runs

    write_fixture(tmp_path)
    experiments = experiments_of(fixture_experiments())
    shutil.rmtree(tmp_path / "runs" / "pareto" / "cory_eta0.3" / "seed2")  # the sweep's last seed never ran
    scored = score_runs.score(tmp_path, ["imdb", "pareto"], experiments, [0, 1, 2], ReportConfig())
    assert "pareto" not in {c.key for c in scored} and "imdb_kl_ratio" in {c.key for c in scored}
    assert "pareto: left out" in capsys.readouterr().err

    _params_for_main(monkeypatch, experiments)
    out = tmp_path / "rerun" / "claims.json"
    score_runs.main([str(tmp_path), "--groups", "imdb", "pareto", "--claims-json", str(out)])
    written = json.loads(out.read_text())
    assert written == json.loads(json.dumps(summary_json(scored)))
    rows = {r[0]: r for r in rerun_rows(summary_json(claims_by_key(tmp_path).values()), written)}
    assert rows["`imdb_kl_ratio`"][3] == "yes" and rows["`pareto`"][3] == "-"


def test_score_runs_pools_two_runs_as_further_seeds(tmp_path, monkeypatch, capsys):
    """Two outputs folders of one profile: the second's seeds count after the first's, so a claim is judged on all;
    pooling a folder with itself gives each quantity twice, the same means and a claim judged on twice the seeds."""
    import shutil

    import tools.score_runs as score_runs

    write_fixture(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    experiments = experiments_of(fixture_experiments())
    pooled = score_runs.pool([tmp_path / "a", tmp_path / "b"], tmp_path / "pool", experiments, [0, 1, 2])
    assert pooled["imdb"].seeds == [0, 1, 2, 3, 4, 5]
    assert (tmp_path / "pool" / "runs" / "imdb" / "cory" / "seed4").resolve() == \
        (tmp_path / "b" / "runs" / "imdb" / "cory" / "seed1").resolve()
    alone = {c.key: c for c in score_runs.score(tmp_path / "a", ["imdb"], experiments, [0, 1, 2], ReportConfig())}
    both = {c.key: c for c in score_runs.score(tmp_path / "pool", ["imdb"], pooled, [0, 1, 2], ReportConfig())}
    assert both.keys() == alone.keys()
    assert both["imdb_kl_ratio"].results[0].seeds == {"imdb/ppo": 6, "imdb/cory": 6}
    assert both["imdb_kl_ratio"].results[0].interval.estimate == pytest.approx(
        alone["imdb_kl_ratio"].results[0].interval.estimate)

    _params_for_main(monkeypatch, experiments)
    score_runs.main([str(tmp_path / "a"), str(tmp_path / "b"), "--groups", "imdb"])
    assert "seeds {'imdb/ppo': 6, 'imdb/cory': 6}" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="nowhere/runs: not found"):
        score_runs.main([str(tmp_path / "a"), str(tmp_path / "nowhere")])


def test_the_first_screen_answers_from_the_claims_and_the_run_files(tmp_path):
    outputs, reports = tmp_path / "outputs", tmp_path / "reports" / "fixture"
    write_fixture(outputs)
    copy_imdb_group(outputs, "imdb_smollm2", ("ppo", "cory"))
    experiments = experiments_of(fixture_experiments(extra_imdb={"imdb_smollm2": ("ppo", "cory")}))
    cfg = ReportConfig(imdb_groups=("imdb", "imdb_smollm2"))
    _, claims = write_report(outputs, reports, cfg, experiments, None, "fixture")
    lines = (reports / "REPORT.md").read_text().splitlines()
    answer = lines[2:lines.index("", 2)]
    assert answer[0] == ("- **Does CORY beat PPO on a pretrained LM?** Not tested in this profile: report.mechanism "
                         "names no experiment (PPO at several KL coefficients, CORY, CORY without knowledge transfer).")
    kl = next(c for c in claims if c.key == "imdb_smollm2/imdb_kl_ratio").results
    assert answer[1] == (f"- KL on smollm2 (135M, pretrained), final: PPO / CORY-LLM1 (as pioneer) "
                         f"{kl[0].interval.estimate:.4g} "
                         f"[{kl[0].interval.low:.4g}, {kl[0].interval.high:.4g}] (CORY-LLM1's final KL is lower than "
                         f"PPO's: {kl[0].verdict}; PPO's final KL is more than 2x CORY-LLM1's: {kl[1].verdict}); PPO / "
                         f"CORY-LLM2 (as pioneer) {kl[2].interval.estimate:.4g} [{kl[2].interval.low:.4g}, "
                         f"{kl[2].interval.high:.4g}] (CORY-LLM2's final KL is lower than PPO's: {kl[2].verdict}; PPO's "
                         f"final KL is more than 2x CORY-LLM2's: {kl[3].verdict}).")
    assert answer[2] == ("- Degenerate seeds (collapse by behaviour, report.collapse; 95% Clopper-Pearson): PPO 3 of 3 "
                         "[0.29, 1.00]; CORY-LLM1 0 of 3 [0.00, 0.71]; CORY-LLM2 0 of 3 [0.00, 0.71].")
    assert answer[3].startswith("- Math pass@1 (a sanity check): base 0.1, PPO 0.121, CORY-LLM1 0.182, CORY-LLM2 0.172 "
                                "(means over training seeds); CORY-LLM1 - PPO 0.0606 [")
    tally = {v: sum(c.verdict == v for c in claims) for v in (HELD, NOT_HELD, INCONCLUSIVE, NOT_TESTED)}
    assert answer[4] == (f"- Verdicts of the {len(claims)} claims: {tally[HELD]} held, {tally[INCONCLUSIVE]} "
                         f"inconclusive, {tally[NOT_TESTED]} not tested (in this profile).") and not tally[NOT_HELD]
    text = "\n".join(lines)
    # runs, seeds, time
    assert "| `imdb_smollm2` | smollm2 (135M, pretrained) | ppo, cory | 3 ([0, 1, 2]) | 30 | 13 |" in text
    assert "- `math`: a sanity check of the verifiable reward" in text
    assert "Its PPO ends at a final KL of 12 (mean over seeds). pass@k is judged for k <= 5" in text
    # at KL 1, as the default profile's math model ends, the report says what that regime cannot show
    low = write_report(outputs, reports, ReportConfig(imdb_groups=cfg.imdb_groups, calibration_kl=20.0), experiments,
                       None, "fixture")
    assert low and "final KL of 12 (mean over seeds), below report.calibration_kl (20), where PPO does not collapse" \
        in (reports / "REPORT.md").read_text()
    assert "- `imdb`, imdb_small (29M, from scratch): a sanity check of the pipeline." in text
    assert "Device: not recorded (the runs' provenance.json)." in text
