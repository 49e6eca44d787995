"""The building blocks of the claims: per-seed quantities of a run (final values, slopes, drawdowns), the combined
reward's eta, a claim's table of quantities and the context one build of the claims shares (settings, an IMDB group's
key and title prefixes)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from cory.report.curves import final_value, late_slope, max_drawdown
from cory.report.paper import PAPER_VALUES
from cory.report.results import Run
from cory.report.stats import Bootstrap
from cory.report.verdicts import Claim, Effect, PerSeed

if TYPE_CHECKING:
    from cory.report.config import ReportConfig


LLMS = ("LLM1", "LLM2")


def _key(llm: str, metric: str) -> str:
    return f"{llm.lower()}/{metric}"


def final(run: Run, key: str, cfg: ReportConfig) -> PerSeed:
    return run.per_seed(key, lambda y: final_value(y, cfg.last_n))


def slope(run: Run, key: str) -> PerSeed:
    return run.per_seed(key, late_slope)


def drawdown(run: Run, key: str, cfg: ReportConfig) -> PerSeed:
    return run.per_seed(key, lambda y: max_drawdown(y, cfg.stability_window))


def partner_coef(run: Run) -> float:
    """c of the collective reward r_self + c * r_partner the run was trained with (from its config.json)."""
    return float(run.config.get("cory", {}).get("partner_reward_coef", math.nan))


def combined_eta(run: Run) -> float:
    """eta of the combined reward r - eta * KL the run logged (TrainConfig.eta: train.combined_reward_eta, or
    ppo.init_kl_coef where that is null), from its config.json."""
    eta = run.config.get("combined_reward_eta")
    return float(eta if eta is not None else run.config.get("ppo", {}).get("init_kl_coef", math.nan))


def eta_text(runs: dict[str, Run]) -> str:
    """The combined reward's eta of the runs (label -> run): "η = 0.3", or one per run where they differ."""
    etas = {label: combined_eta(run) for label, run in runs.items()}
    if len(set(etas.values())) == 1:
        return f"η = {next(iter(etas.values())):g}"
    return "η = " + ", ".join(f"{eta:g} ({label})" for label, eta in etas.items())


COMBINED = "combined reward r - η·KL"
ETA_SOURCE = "train.combined_reward_eta, else ppo.init_kl_coef"
MEANS = "seed means"

GROUP_MODELS = {"imdb": "imdb_small (30M, from scratch)", "imdb_smollm2": "SmolLM2-135M"}
"""IMDB experiment group -> how claim titles name its model (other groups: by the group's name)."""


@dataclass
class Table:
    """A claim's quantities under construction, each with the run it comes from."""

    quantities: dict[str, PerSeed] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)

    def add(self, label: str, run: Run | str, values: PerSeed) -> str:
        self.quantities[label] = values
        self.runs[label] = run if isinstance(run, str) else run.name
        return label


@dataclass(frozen=True)
class Context:
    """What every claim of one build shares: the settings, and for an IMDB group its key and title prefixes."""

    cfg: ReportConfig
    key_prefix: str = ""
    title_prefix: str = ""

    def claim(self, key: str, figure: str, paper: str, rule: str, table: Table, effects: list[Effect],
              notes: list[str] | None = None) -> Claim:
        cfg = self.cfg
        return Claim(f"{self.key_prefix}{key}", figure, f"{self.title_prefix}{paper}", rule, table.quantities,
                     table.runs, effects, PAPER_VALUES.get(key, {}), notes or [],
                     Bootstrap(cfg.confidence, cfg.bootstrap_draws, cfg.bootstrap_seed), cfg.test_claims)


def difference(label: str, a: str, b: str, op: str = ">", threshold: float = 0.0) -> Effect:
    """The effect mean(a) - mean(b), `op` threshold (0 unless said)."""
    return Effect(label, (a, b), lambda x, y: np.subtract(x, y), op, threshold)


def mean_of(label: str, a: str, op: str, threshold: float,
            bounds: tuple[float, float] = (-math.inf, math.inf)) -> Effect:
    """The effect mean(a), `op` threshold; `bounds`: the values a can take."""
    return Effect(label, (a,), lambda x: x, op, threshold, bounds)


def group_context(group: str, cfg: ReportConfig) -> Context:
    """Keys <group>/<claim> for a group other than `imdb`; titles prefixed with its model where there are several
    IMDB groups or it is not `imdb` (the default profile's titles stay as they were)."""
    named = group != "imdb" or len(cfg.imdb_groups) > 1
    return Context(cfg, "" if group == "imdb" else f"{group}/",
                   f"{GROUP_MODELS.get(group, group)}: " if named else "")


def figure_of(ctx: Context, name: str) -> str:
    """The figure of a claim: the report draws every figure for the `imdb` group, and Fig. 3 for each other IMDB
    group (fig3_<group>.png); the other figures' claims of those groups have none."""
    if not ctx.key_prefix:
        return name
    return f"fig3_{ctx.key_prefix.rstrip('/')}.png" if name == "fig3_imdb.png" else ""
