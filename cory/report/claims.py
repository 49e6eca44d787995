"""The paper's claims as testable rules, built from the runs: one Claim per statement of the paper, in its order.

Each claim becomes per-seed quantities computed from the runs (`cory.report.results.Inputs`) and one effect per
sub-condition (one for LLM1 and one for LLM2, say): a number computed from the seed means of some quantities, with
its interval over seeds (cory.report.stats: an expanded percentile bootstrap, each run's seeds resampled on their
own), and the side of a threshold the claim puts it on (cory.report.verdicts). A sub-condition held where its whole
interval lies on that side, did not hold where the whole interval lies on the other, and is inconclusive where the
interval contains the threshold (or, with one seed, does not exist). A claim held if every sub-condition held, did
not hold if any did not, and is inconclusive otherwise; "not measurable" is a claim without numbers. The report prints each effect with
its interval and the per-seed numbers it was computed from, so every verdict can be checked by hand.

The curve statistics are in cory.report.curves, the building blocks in cory.report.quantities, the rules in
cory.report.claims_imdb and cory.report.claims_math, and the paper's own numbers (shown beside ours, never used by a
verdict) in cory.report.paper; this module gathers them and re-exports what the report and the tests read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cory.report.claims_imdb import (ablation_claims, collapse_claim, combined_fall_claim, cooperation_claims,
                                     imdb_claims)
from cory.report.claims_math import PARETO_TASKS, math_claims, pareto_claim, passk_claim
from cory.report.curves import (NOISE_QUANTILE, curve_gap, dominated_share, final_value, late_slope, max_drawdown,
                                noise_fall, peak, reach_iteration, smooth, start_value)
from cory.report.paper import PAPER_VALUES
from cory.report.quantities import (COMBINED, ETA_SOURCE, GROUP_MODELS, LLMS, Context, Table, combined_eta,
                                    difference, eta_text, figure_of, final, group_context, mean_of, partner_coef)
from cory.report.results import SWEEP_TASKS, Inputs
from cory.report.stats import HELD, INCONCLUSIVE, NOT_HELD, NOT_MEASURABLE, NOT_TESTED
from cory.report.verdicts import Claim, Effect, EffectResult, PaperValue, PerSeed, RateDifference, fall_factor, ratio

if TYPE_CHECKING:
    from cory.report.config import ReportConfig

__all__ = ["COMBINED", "ETA_SOURCE", "GROUP_MODELS", "HELD", "INCONCLUSIVE", "LLMS", "NOISE_QUANTILE", "NOT_HELD",
           "NOT_MEASURABLE", "NOT_TESTED", "PAPER_VALUES", "PARETO_TASKS", "Claim", "Context", "Effect", "EffectResult",
           "PaperValue", "PerSeed", "RateDifference", "Table", "ablation_claims", "build_claims", "collapse_claim",
           "combined_eta", "combined_fall_claim", "cooperation_claims", "curve_gap", "difference", "dominated_share",
           "eta_text", "fall_factor", "figure_of", "final", "final_value", "group_context", "imdb_claims",
           "late_slope", "math_claims", "max_drawdown", "mean_of", "noise_fall", "pareto_claim", "partner_coef",
           "passk_claim", "peak", "ratio", "reach_iteration", "smooth", "start_value"]


def build_claims(inputs: Inputs, cfg: ReportConfig) -> list[Claim]:
    """Every claim of CORY.md §4 that the pipeline reproduces, in the paper's order; the IMDB ones for each group of
    report.imdb_groups."""
    groups = {group: group_context(group, cfg) for group in cfg.imdb_groups}
    return [*(c for g, ctx in groups.items() for c in imdb_claims(inputs.runs[g], ctx)),
            *math_claims(inputs.runs["math"], Context(cfg)),
            *(pareto_claim(task, inputs.sweeps.get(task), Context(cfg)) for task in SWEEP_TASKS),
            passk_claim(inputs.passk, Context(cfg)),
            *(c for g, ctx in groups.items() for c in ablation_claims(inputs.runs[g], ctx)),
            *(c for g, ctx in groups.items() for c in cooperation_claims(inputs.runs[g], ctx))]
