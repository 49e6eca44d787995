"""The report reads true: every verdict agrees with its intervals, a seed that cannot be measured leaves the others
in the verdict, the curve rules need what they say (a rise before a peak, a fall beyond batch noise), and the numbers
are printed with sensible digits; the time tables add up."""

import math
import re

import numpy as np
import pytest

from cory.report.claims import (
    HELD,
    INCONCLUSIVE,
    NOT_HELD,
    NOT_MEASURABLE,
    Claim,
    Effect,
    combined_eta,
    math_claims,
    noise_fall,
)
from cory.report.claims import Context
from cory.report.config import ReportConfig
from cory.report.markdown import claim_markdown, decimals, fixed, mean_std, time_table
from cory.report.report import write_report
from cory.report.results import Run

from report_fixtures import (claims_by_key, decided_by_its_intervals, experiments_of, fixture_experiments, run_of,
                             write_fixture)


# --------------------------------------------------------------------------------------------------------------------
# The report reads true
# --------------------------------------------------------------------------------------------------------------------


def test_a_seed_that_cannot_be_measured_leaves_the_others_in_the_verdict():
    # was: the mean over seeds took the NaN, so the verdict said "not measurable" beside numbers on 2 of 3 seeds
    claim = Claim("k", "f.png", "paper", "rule", {"a": {0: 1.0, 1: 1.02, 2: math.nan}, "b": {0: 0.5, 1: 0.5, 2: 0.5}},
                  {"a": "A", "b": "B"}, [Effect("a - b", ("a", "b"), magnitude="a above b", op=">", threshold=0.0)])
    result = claim.results[0]
    assert result.seeds == {"A": 2, "B": 3} and claim.means() == pytest.approx({"a": 1.01, "b": 0.5})
    # seeds 0-1 against 0-2 do not pair: Welch's, a's 2 seeds 0.02 apart and b's none: 0.51 -+ t_{0.975, 1} x 0.01
    assert result.interval.estimate == pytest.approx(0.51) and result.interval.low == pytest.approx(0.3829, abs=1e-4)
    assert claim.verdict == HELD and decided_by_its_intervals(claim)
    text = "\n".join(claim_markdown(1, claim))
    assert "- **Verdict: held** (95% intervals; a above b: held ([0.3829, 0.6371] lies above 0))" in text
    assert "| a above b | a - b | 0.51 [0.3829, 0.6371] | Welch t (df 1) | - | held | A 2, B 3 |" in text
    assert "| a | 1.010 ± 0.010 (2 seeds) | 0: 1.000, 1: 1.020, 2: n/a |" in text  # the mean the effect read
    # an infinite value (a ratio to 0) is no measurement either; on no seed at all: not measurable
    only = Claim("k", "f.png", "paper", "rule", {"a": {0: math.inf, 1: math.nan}}, {"a": "A"},
                 [Effect("a", ("a",), (1.0,), magnitude="a above 0")])
    assert only.results[0].seeds == {"A": 0} and only.verdict == NOT_MEASURABLE
    # no finite value: every value that exists is still shown
    lone = Claim("k", "f.png", "paper", "rule", {"a": {0: math.nan}, "b": {0: 0.012804}}, {"a": "A", "b": "A"},
                 [Effect("a - b", ("a", "b"), magnitude="a above b")])
    assert "| b | 0.01280 (1 seed) | 0: 0.01280 |" in "\n".join(claim_markdown(1, lone))


def test_every_verdict_agrees_with_its_intervals(tmp_path):
    write_fixture(tmp_path / "mixed", cory_kl={0: 5.0, 1: 5.0, 2: 10.0})
    write_fixture(tmp_path / "short", seeds=(0, 1), iterations=2)  # late slopes of a 1-point half: n/a
    for outputs in (tmp_path / "mixed", tmp_path / "short"):
        for claim in claims_by_key(outputs).values():
            assert decided_by_its_intervals(claim), (outputs.name, claim.key, claim.results)
            for r in claim.results:  # the seeds-needed estimate points the way the verdict is open
                assert math.isnan(r.seeds_needed) or r.seeds_needed >= 2


def _math_runs(ppo_rewards: dict[int, np.ndarray]) -> dict[str, Run]:
    cory = {s: {f"{x}/{m}": np.ones_like(y) for x in ("llm1", "llm2") for m in ("task_reward", "kl", "combined_reward")}
            for s, y in ppo_rewards.items()}
    ppo = {s: {"llm1/task_reward": y, "llm1/kl": np.ones_like(y), "llm1/combined_reward": y}
           for s, y in ppo_rewards.items()}
    return {"ppo": run_of(ppo, name="math/ppo"), "cory": run_of(cory, name="math/cory")}


def peak_claim(rewards: dict[int, np.ndarray], cfg: ReportConfig) -> Claim:
    return math_claims(_math_runs(rewards), Context(cfg))[0]


def peaks_on(claim: Claim, seed: int, cfg: ReportConfig, length: int) -> bool:
    """The peak-then-decline rule on one seed's numbers (the effects read their seed means)."""
    v = {label: values[seed] for label, values in claim.quantities.items()}
    top = v["PPO peak iteration (smoothed task reward)"]
    return (cfg.stability_window <= top < length - cfg.last_n and v["PPO rise: peak - smoothed start"] > 0
            and v[f"PPO fall beyond max({cfg.decline:g} x rise, batch noise)"] > 0)


def test_rises_then_falls_needs_a_rise_before_the_peak():
    t = np.arange(60, dtype=float)
    falls_from_start = 1.0 - t / 60  # the peak is iteration 0: no rise at all
    early_bump = np.where(t < 3, 1.0 + 0.1 * t, 1.0 - t / 60)  # a "peak" at iteration 2, inside the first window
    rises_then_falls = np.exp(-(((t - 25) / 10) ** 2))  # up to iteration 25, then down to ~0
    cfg = ReportConfig(last_n=5, stability_window=5)
    claim = peak_claim({0: falls_from_start, 1: early_bump, 2: rises_then_falls}, cfg)
    assert claim.key == "math_ppo_peak"
    assert [peaks_on(claim, s, cfg, 60) for s in (0, 1, 2)] == [False, False, True]
    assert claim.verdict == INCONCLUSIVE  # one seed of three peaks: the mean peak iteration's interval holds [0, 25]
    earliest = claim.results[0]
    assert earliest.interval.low <= 0.0 and earliest.interval.high >= 25.0 and earliest.verdict == INCONCLUSIVE
    assert claim.quantities["PPO peak iteration (smoothed task reward)"][0] == 0
    assert claim.quantities["PPO rise: peak - smoothed start"][0] == 0
    assert "is no earlier than iteration 5" in claim.rule and "rise > 0" in claim.rule
    only_falls = peak_claim({0: falls_from_start, 1: falls_from_start}, ReportConfig(last_n=5))
    assert only_falls.verdict == NOT_HELD  # never rose: did not hold (it used to be held on a fall share)
    assert [r.verdict for r in only_falls.results] == [NOT_HELD, HELD, NOT_HELD, HELD]  # falls, but from the start


def test_a_fall_within_batch_noise_is_no_decline():
    rng = np.random.default_rng(0)
    t = np.arange(150, dtype=float)
    rise = 0.1 * np.minimum(t / 10, 1.0)  # up over the first 10 iterations, then flat: no decline to find
    flat = 0.2 + rise + rng.normal(0, 0.07, t.size)  # math-like batches: 0/1 rewards of 16 problems
    declines = 0.2 + rise - 0.15 * np.clip((t - 60) / 60, 0, 1) + rng.normal(0, 0.07, t.size)
    cfg = ReportConfig()
    claim = peak_claim({0: flat, 1: declines}, cfg)
    values = {label: v[0] for label, v in claim.quantities.items()}
    fall, noise = values["PPO fall: peak - final value"], values["PPO fall batch noise alone reaches (0.95 quantile)"]
    assert fall >= 0.1 * values["PPO rise: peak - smoothed start"]  # the rule without the noise bound would hold
    assert fall < noise
    assert [peaks_on(claim, s, cfg, 150) for s in (0, 1)] == [False, True] and claim.verdict == INCONCLUSIVE
    assert "and the fall that the run's batch noise alone reaches (the 0.95 quantile" in claim.rule
    # the bound is a quantile of falls that pure noise gives: about 1 in 20 flat curves passes at 0.95
    nulls = [0.2 + rng.normal(0, 0.07, t.size) for _ in range(100)]
    many = peak_claim(dict(enumerate([0.2 + rise + y - 0.2 for y in nulls])), cfg)
    assert sum(peaks_on(many, s, cfg, 150) for s in range(100)) <= 15
    assert many.verdict == NOT_HELD  # 100 flat seeds: the mean fall beyond the noise is clearly below 0
    assert noise_fall(flat, 10, 10, quantile=0.0) < fall < noise_fall(flat, 10, 10, quantile=1.0)


def test_combined_reward_eta_is_stated_with_where_it_comes_from(tmp_path):
    write_fixture(tmp_path)
    claims = claims_by_key(tmp_path)
    rule = claims["imdb_combined_reward"].rule
    assert "r - η·KL (η = 0.3; train.combined_reward_eta, else ppo.init_kl_coef)" in rule
    assert "(η = 0.01;" in claims["math_cory_combined"].rule
    assert combined_eta(run_of({0: {"x": np.zeros(2)}}, {"combined_reward_eta": 0.05, "ppo": {"init_kl_coef": 0.3}})) \
        == 0.05
    assert combined_eta(run_of({0: {"x": np.zeros(2)}}, {"combined_reward_eta": None, "ppo": {"init_kl_coef": 0.3}})) \
        == 0.3


def test_mean_std_digits_by_hand():
    assert mean_std([86.64, 87.02, 87.4])[0] == "87.02 ± 0.31 (3 seeds)"  # std 2 significant digits, mean alike
    assert mean_std([100.0, 80.0, 65.0])[0] == "82 ± 14 (3 seeds)"
    assert mean_std([3.284, 3.284 + 4e-6])[0] == "3.284 ± 0.000 (2 seeds)"  # float noise: at the mean's 4th digit
    assert mean_std([2.948, 2.948])[0] == "2.948 ± 0.000 (2 seeds)"
    assert mean_std([-0.0009365, 0.000325, 0.0003381])[0] == "-0.00009 ± 0.00060 (3 seeds)"
    assert mean_std([12000.0, 13300.0])[0] == "12650 ± 650 (2 seeds)"
    assert mean_std([12.0, 12.0, 12.0])[0] == "12 ± 0 (3 seeds)"  # an iteration: a whole number
    assert mean_std([0.3063])[0] == "0.3063 (1 seed)" and mean_std([math.nan])[0] == "n/a"
    assert decimals(1234.0, 567.0) == -1 and fixed(1234.0, -1) == "1230"
    assert fixed(-0.0001, 2) == "0.00" and fixed(math.nan, 2) == "n/a"


SPREAD = re.compile(r"(-?\d+(?:\.(\d+))?) ± (\d+(?:\.(\d+))?) \(\d seeds\)")


def test_every_mean_std_in_the_report_has_sensible_digits(tmp_path):
    outputs, reports = tmp_path / "outputs", tmp_path / "reports"
    write_fixture(outputs)
    write_report(outputs, reports, ReportConfig(), experiments_of(fixture_experiments()), None, "fixture")
    report = (reports / "REPORT.md").read_text()
    spreads = SPREAD.findall(report)
    assert len(spreads) > 50
    for mean, mean_decimals, std, std_decimals in spreads:
        assert len(mean_decimals) == len(std_decimals), (mean, std)  # the same decimal place
        significant = std.replace(".", "").lstrip("0")
        assert len(significant) <= 2 or float(std) == 0 or "." not in std, (mean, std)
    rows = re.findall(r"^\| [^|]+ \| (-?[\d.]+) ± [\d.]+ \(\d seeds\) \| ([^|]*) \|[^|]*\|$", report, re.M)
    assert len(rows) > 40
    for mean, per_seed in rows:  # the per-seed values have the mean's decimal places
        places = len(mean.partition(".")[2])
        assert all(len(v.partition(".")[2]) == places for v in re.findall(r": (-?[\d.]+|n/a)", per_seed) if v != "n/a")


def test_time_table_gives_each_stage_its_share_of_the_total_without_the_report():
    timings = [{"stage": "train", "seconds": 300.0, "peak_rss_gib": 2.0}, {"stage": "evaluate", "seconds": 100.0},
               {"stage": "report", "seconds": 50.0}]
    rows = [line.split("|")[1:-1] for line in time_table(timings)[2:]]
    assert [[cell.strip() for cell in row[:4]] for row in rows] == [
        ["train", "300.0", "5.00", "75%"], ["evaluate", "100.0", "1.67", "25%"], ["**total**", "400.0", "6.67", "100%"]]
    assert rows[0][4].strip() == "2.0" and rows[1][4].strip() == "-"
    assert time_table([{"stage": "report", "seconds": 1.0}]) == ["(no stage timing files were found)"]


def test_time_table_shows_the_time_between_the_stages_when_they_recorded_their_clock():
    timings = [{"stage": "train", "seconds": 300.0, "started_at": 1000.0, "finished_at": 1300.0},
               {"stage": "evaluate", "seconds": 100.0, "started_at": 1350.0, "finished_at": 1450.0},
               {"stage": "report", "seconds": 50.0, "started_at": 1460.0, "finished_at": 1510.0}]
    rows = [[cell.strip() for cell in line.split("|")[1:5]] for line in time_table(timings)[2:]]
    assert rows == [["train", "300.0", "5.00", "67%"], ["evaluate", "100.0", "1.67", "22%"],
                    ["*between the stages*", "50.0", "0.83", "11%"], ["**first start to last end**", "450.0", "7.50", "100%"]]


def test_time_table_splits_the_time_between_the_stages_where_the_processes_recorded_their_start():
    timings = [{"stage": "evaluate", "seconds": 100.0, "started_at": 1350.0, "finished_at": 1450.0,
                "process_started_at": 1338.0},  # listed first (as the files sort), shown in the order they ran
               {"stage": "train", "seconds": 300.0, "started_at": 1000.0, "finished_at": 1300.0,
                "process_started_at": 990.0}]  # the first stage's imports: counted, as every later stage's
    rows = [[cell.strip() for cell in line.split("|")[1:5]] for line in time_table(timings)[2:]]
    assert rows == [["train", "300.0", "5.00", "65%"], ["evaluate", "100.0", "1.67", "22%"],
                    ["*before and between the stages*", "60.0", "1.00", "13%"],
                    ["&nbsp;&nbsp;*of which the stage processes' start (Python, imports, checks)*", "22.0", "0.37", "5%"],
                    ["&nbsp;&nbsp;*of which DVC and the processes' exit*", "38.0", "0.63", "8%"],
                    ["**first process start to last end**", "460.0", "7.67", "100%"]]


def test_a_runs_phase_split_is_a_mean_over_the_seeds_that_recorded_it():
    from cory.report.markdown import phase_split

    run = Run("g/r", {}, {}, [], {0: 10.0, 1: 12.0})
    assert phase_split(run) == "-"  # written before phases were recorded
    run.phase_seconds = {0: {"iterations": 6.0, "probes": 1.0, "samples": 1.0, "checkpoints": 1.0, "setup": 1.0},
                         1: {"iterations": 8.0, "checkpoints": 3.0, "logging": 0.5, "save": 0.5}}
    assert phase_split(run) == "7.0 / 1.0 / 2.0 / 1.0"
