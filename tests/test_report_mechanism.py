"""The report's headline rule (cory.report.mechanism, docs/claims.md): task reward at matched KL by hand, the rule on
synthetic runs whose answer is known (CORY above PPO's frontier: held; CORY on PPO's path, later: did not hold; seed
noise: inconclusive), and bad settings of report.mechanism stopping `python -m pipeline.params` with one line."""

import copy
import math
import subprocess
import sys

import numpy as np
import pytest
import yaml

from cory.report.claims import HELD, INCONCLUSIVE, NOT_HELD, NOT_TESTED
from cory.report.config import ReportConfig
from cory.report.mechanism import reward_at_kl, shared_levels
from cory.report.report import write_report
from cory.schema import ConfigError
from pipeline.params import validate
from pipeline.paths import ROOT
from pipeline.profile import render

from report_fixtures import MECHANISM, claims_by_key, experiments_of, fixture_experiments, run_of, write_fixture

SIX = tuple(range(6))


def test_reward_at_matched_kl_by_hand():
    kl, reward = np.array([0.0, 1.0, 2.0, 3.0, 4.0]), np.array([0.0, 10.0, 20.0, 30.0, 40.0])
    # level 2.5 is first reached at iteration 3 (KL 3); between iterations 2 and 3 it lies half-way: 20 + 0.5 x 10
    assert reward_at_kl(reward, kl, 2.5, 1) == 25.0
    assert math.isnan(reward_at_kl(reward, kl, 0.0, 1))  # reached at the start: no crossing to read
    assert math.isnan(reward_at_kl(reward, kl, 5.0, 1))  # never reached
    # smoothed over 3 (centred, fewer points at the ends): KL [0.5, 1, 2, 3, 3.5], reward likewise x 10
    assert reward_at_kl(reward, kl, 1.5, 3) == pytest.approx(15.0)
    # the first crossing, not a later one: a KL that rises, falls and rises again is read where it first got there
    assert reward_at_kl(np.array([0.0, 5.0, 1.0, 7.0]), np.array([0.0, 2.0, 0.0, 2.0]), 2.0, 1) == 5.0


def test_kl_levels_are_those_every_seed_of_both_runs_crosses():
    t = np.arange(20.0)
    fast = run_of({s: {"llm1/task_reward": t, "llm1/kl": 2.0 * t} for s in (0, 1)})
    slow = run_of({s: {"llm1/task_reward": t, "llm1/kl": (1.0 + s) * t / 2} for s in (0, 1)})  # seed 0 reaches 9.5
    assert shared_levels([fast, slow], [0.5, 5.0, 9.0, 12.0], 1) == [0.5, 5.0, 9.0]  # 12: seed 0 of `slow` never
    assert shared_levels([fast, slow], None, 1) == [1.9, 3.8, 5.7, 7.6]  # 4 inside (0, 9.5]
    cory = run_of({0: {"llm1/task_reward": t, "llm1/kl": t, "pioneer/task_reward": t + 1, "pioneer/kl": t / 4}})
    assert shared_levels([cory], None, 1) == [0.95, 1.9, 2.85, 3.8]  # CORY's pioneer role: up to 19 / 4


@pytest.mark.parametrize("curves, verdict", [("above", HELD), ("dilution", NOT_HELD), ("noisy", INCONCLUSIVE)])
def test_the_rule_on_runs_whose_answer_is_known(tmp_path, curves, verdict):
    """PPO at two KL coefficients walks one (reward, KL) path; CORY walks 1.5x it (above the frontier), the path
    itself more slowly (dilution: what a larger KL coefficient does), or 1.1x it with seed noise; the control walks
    the path."""
    write_fixture(tmp_path, seeds=SIX, mechanism=curves)
    claim = claims_by_key(tmp_path, mechanism=MECHANISM)["mechanism"]
    assert claim.verdict == verdict, [(r.statement, r.verdict, r.interval) for r in claim.results]
    labels = [r.label for r in claim.results]
    assert labels == [f"cory - {other} reward at matched KL" for other in ("ppo", "ppo_kl045", "cory_no_kt")
                      for _ in range(2)]
    gain = np.mean([v for label, q in claim.quantities.items() if "task-reward gain" in label for v in q.values()])
    margin = claim.results[1].threshold
    assert margin == pytest.approx(0.1 * gain) and claim.results[1].seeds == {"imdb_smollm2/cory": 6,
                                                                              "imdb_smollm2/ppo": 6}
    if curves == "above":  # every seed above every PPO run and the control: the smallest p of 6 pairs
        assert all(r.p == 1 / 64 for r in claim.results if r.kind == "direction")
    if curves == "dilution":  # on PPO's path: the gain's interval lies below the margin
        assert any(r.kind == "magnitude" and r.interval.high < margin for r in claim.results)
    if curves == "noisy":
        assert any(r.interval.low < 0 < r.interval.high for r in claim.results)
    assert claim.figure == "fig_frontier_imdb_smollm2.png" and "cory vs ppo: KL levels" in claim.notes[0]


def test_without_the_rule_or_its_group_the_headline_is_not_tested(tmp_path):
    write_fixture(tmp_path)
    claim = claims_by_key(tmp_path)["mechanism"]
    assert claim.verdict == NOT_TESTED and claim.absent.startswith("report.mechanism names no experiment")


def test_runs_too_short_for_a_shared_kl_level_still_get_their_figure(tmp_path):
    """The smoke profile's mechanism group: 1 seed of 3 iterations, shorter than the smoothing window, so no KL level
    lies inside every run's range; the report draws the figure empty and says why (was: matplotlib's legend of no
    line stopped the report stage)."""
    write_fixture(tmp_path / "outputs", seeds=(0,), iterations=3, mechanism="above")
    cfg = ReportConfig(test_claims=False, mechanism=MECHANISM)
    experiments = experiments_of(fixture_experiments(seeds=(0,), mechanism=True))
    claims = {c.key: c for c in write_report(tmp_path / "outputs", tmp_path / "reports", cfg, experiments, None,
                                             "fixture")[1]}
    assert claims["mechanism"].verdict == NOT_TESTED and "no KL level both cross" in claims["mechanism"].notes[0]
    assert (tmp_path / "reports" / "fig_frontier_imdb_smollm2.png").stat().st_size > 5_000
    assert "no KL level lies inside every seed's smoothed range, so nothing is drawn" in (
        tmp_path / "reports" / "REPORT.md").read_text()


def mechanism_params(default: dict, **rule) -> dict:
    """The default profile with the runs a mechanism experiment compares in its SmolLM2 group, and `rule` over
    report.mechanism's settings."""
    params = copy.deepcopy(default)
    smollm2 = params["experiments"]["imdb_smollm2"]
    ppo = {"model": "smollm2", "train": {"cory": {"n_agents": 1}}}
    smollm2["runs"] = {
        "ppo": ppo, "ppo_kl045": {**ppo, "train": {"cory": {"n_agents": 1}, "ppo": {"init_kl_coef": 0.045}}},
        "cory": {"model": "smollm2"}, "cory_no_kt": {"model": "smollm2", "train": {"cory": {"knowledge_transfer": False}}},
    }
    params["report"]["mechanism"] = {"group": "imdb_smollm2", "frontier": ["ppo", "ppo_kl045"], "cory": ["cory"],
                                     "control": "cory_no_kt", **rule}
    return params


@pytest.fixture(scope="module")
def default():
    return render("default")


def test_a_valid_rule_passes(default):
    assert validate(mechanism_params(default)).report.mechanism.frontier == ["ppo", "ppo_kl045"]


@pytest.mark.parametrize("edit, message", [
    (lambda p: p["report"]["mechanism"].update(frontier=["ppo"]),
     r"^report\.mechanism\.frontier: PPO's frontier needs runs at two or more KL coefficients, got \['ppo'\]$"),
    (lambda p: p["experiments"]["imdb_smollm2"]["runs"]["ppo_kl045"]["train"].pop("ppo"),
     r"^report\.mechanism\.frontier: runs ppo, ppo_kl045 train at one KL coefficient \(train\.ppo\.init_kl_coef "
     r"0\.03\); PPO's frontier needs two or more$"),
    (lambda p: p["report"]["mechanism"].update(cory=["cory", "cory_kl045"]),
     r"^report\.mechanism\.cory: group 'imdb_smollm2' has no run 'cory_kl045' \(it has ppo, ppo_kl045, cory, "
     r"cory_no_kt\)$"),
    (lambda p: p["report"]["mechanism"].update(control="cory"),
     r"^report\.mechanism\.control: run imdb_smollm2/cory must be CORY without knowledge transfer"),
    (lambda p: p["report"]["mechanism"].update(frontier=["ppo", "cory"]),
     r"^report\.mechanism\.frontier: run imdb_smollm2/cory must be single-agent PPO"),
    (lambda p: p["report"]["mechanism"].update(group="imdb_smol"),
     r"^report\.mechanism\.group: no experiment group 'imdb_smol' \(known: "),
    (lambda p: p["experiments"]["imdb_smollm2"].update(seeds=[0]),
     r"^report\.mechanism: its runs train 1 seed; the rule pairs runs by seed and needs two or more "
     r"\(experiments\.imdb_smollm2\.seeds\)$"),
    (lambda p: p["report"]["mechanism"].update(kl_levels=[10, -5]),
     r"^report\.mechanism\.kl_levels: must be positive KL values"),
])
def test_bad_settings_of_the_rule_stop_with_one_line(default, edit, message):
    params = mechanism_params(default)
    edit(params)
    with pytest.raises(ConfigError, match=message) as caught:
        validate(params)
    assert "\n" not in str(caught.value)


def test_python_m_pipeline_params_names_the_setting(default, tmp_path):
    params = mechanism_params(default, frontier=["ppo", "ppo_kl07"])
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    result = subprocess.run([sys.executable, "-m", "pipeline.params"], cwd=ROOT, capture_output=True, text=True,
                            env={"CORY_PARAMS": str(path), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.strip().endswith("params.yaml: report.mechanism.frontier: group 'imdb_smollm2' has no run "
                                          "'ppo_kl07' (it has cory, cory_no_kt, ppo, ppo_kl045)")  # yaml sorts them
