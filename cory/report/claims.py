"""The paper's claims as testable rules, built from the runs: the report's headline (does CORY beat PPO on a
pretrained LM, cory.report.mechanism), then one Claim per statement of the paper, in its order.

Each claim becomes per-seed quantities computed from the runs (`cory.report.results.Inputs`) and effects: numbers
computed from the seed means of some quantities (a difference, a ratio, a rate), each with up to two statements tested
apart, its direction (an exact rank test) and its magnitude (its interval against the paper's threshold); see
cory.report.stats and docs/claims.md. A statement held where its test decides for it, did not hold where its test
decides against it, and is inconclusive otherwise. A claim held if every statement held, did not hold if any did not,
and is inconclusive otherwise; "not measurable" is a claim without numbers, "not tested" one this profile does not
judge (report.test_claims false) or cannot (a run or group it lacks). The report prints each statement with its
interval and the per-seed numbers it was computed from, so every verdict can be checked by hand.

The curve statistics are in cory.report.curves, the building blocks in cory.report.quantities, the rules in
cory.report.mechanism, cory.report.claims_imdb, cory.report.collapse and cory.report.claims_math, and the paper's own
numbers (shown beside ours, never used by a verdict) in cory.report.paper; this module gathers them and re-exports
what the report and the tests read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cory.report.claims_imdb import ablation_claims, combined_fall_claim, cooperation_claims, imdb_claims
from cory.report.claims_math import PARETO_TASKS, math_claims, pareto_claim, passk_claim
from cory.report.collapse import collapse_claim
from cory.report.curves import (NOISE_QUANTILE, curve_gap, final_value, late_slope, max_drawdown, noise_fall, peak,
                                reach_iteration, smooth, start_value)
from cory.report.mechanism import frontier_claim, mechanism_claim, reward_at_kl
from cory.report.paper import PAPER_VALUES
from cory.report.quantities import (COMBINED, ETA_SOURCE, LLMS, Context, Table, combined_eta,
                                    difference, eta_text, figure_of, final, final_as_pioneer, group_context, mean_of,
                                    partner_coef)
from cory.report.results import SWEEP_TASKS, Inputs
from cory.report.stats import HELD, INCONCLUSIVE, NOT_HELD, NOT_MEASURABLE, NOT_TESTED
from cory.report.verdicts import Claim, Effect, PaperValue, PerSeed, Rate, RateDifference, Similar, Test

if TYPE_CHECKING:
    from cory.report.config import ReportConfig

__all__ = ["COMBINED", "ETA_SOURCE", "HELD", "INCONCLUSIVE", "LLMS", "NOISE_QUANTILE", "NOT_HELD",
           "NOT_MEASURABLE", "NOT_TESTED", "PAPER_VALUES", "PARETO_TASKS", "Claim", "Context", "Effect", "PaperValue",
           "PerSeed", "Rate", "RateDifference", "Similar", "Table", "Test", "ablation_claims", "build_claims",
           "collapse_claim", "combined_eta", "combined_fall_claim", "cooperation_claims", "curve_gap", "difference",
           "eta_text", "figure_of", "final", "final_as_pioneer", "final_value", "frontier_claim", "group_context",
           "imdb_claims", "late_slope", "math_claims", "max_drawdown", "mean_of", "mechanism_claim", "noise_fall",
           "pareto_claim", "partner_coef", "passk_claim", "peak", "reach_iteration", "reward_at_kl", "smooth",
           "start_value"]


def build_claims(inputs: Inputs, cfg: ReportConfig) -> list[Claim]:
    """The headline (report.mechanism's rule), then every claim of CORY.md §4 that the pipeline reproduces, in the
    paper's order; the IMDB ones for each group of report.imdb_groups."""
    groups = {group: group_context(group, cfg, inputs.model_of(group)) for group in cfg.imdb_groups}
    return [mechanism_claim(inputs.runs, cfg, Context(cfg)),
            *(c for g, ctx in groups.items() for c in imdb_claims(inputs.runs[g], ctx)),
            *math_claims(inputs.runs["math"], Context(cfg)),
            *(pareto_claim(task, inputs.sweeps.get(task), Context(cfg)) for task in SWEEP_TASKS),
            passk_claim(inputs.passk, Context(cfg)),
            *(c for g, ctx in groups.items() for c in ablation_claims(inputs.runs[g], ctx)),
            *(c for g, ctx in groups.items() for c in cooperation_claims(inputs.runs[g], ctx))]
