"""The building blocks of the claims: per-seed quantities of a run (final values, slopes, drawdowns), the combined
reward's eta, a claim's table of quantities and the context one build of the claims shares (settings, an IMDB group's
key and title prefixes)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from cory.report.curves import final_value, late_slope, max_drawdown
from cory.report.paper import PAPER_VALUES
from cory.report.results import Run
from cory.report.stats import Settings
from cory.report.verdicts import Claim, Effect, PerSeed, Test, every_one

if TYPE_CHECKING:
    from cory.report.config import ReportConfig


LLMS = ("LLM1", "LLM2")


def _key(llm: str, metric: str) -> str:
    return f"{llm.lower()}/{metric}"


def final(run: Run, key: str, cfg: ReportConfig) -> PerSeed:
    return run.per_seed(key, lambda y: final_value(y, cfg.last_n))


def final_as_pioneer(run: Run, llm: str, metric: str, cfg: ReportConfig) -> PerSeed:
    """seed -> the mean of `llm`'s metric over its last last_n iterations as pioneer, the role whose prompt is PPO's
    (an observer's KL is taken on another prompt, the pioneer's answer in context); every iteration of a run without
    roles (PPO); NaN for an agent never pioneer (the observer of a run without role exchange)."""
    out = {}
    for seed, frame in run.histories.items():
        y = run.curves(f"{llm}/{metric}")[seed]
        role = frame[f"{llm}/role"].to_numpy(float) if f"{llm}/role" in frame else np.zeros(len(y))
        pioneer = y[role == 0]
        out[seed] = float(np.mean(pioneer[-cfg.last_n:])) if len(pioneer) else math.nan
    return out


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
              notes: list[str] | None = None, decide: Callable[[list[Test]], str] = every_one) -> Claim:
        cfg = self.cfg
        return Claim(f"{self.key_prefix}{key}", figure, f"{self.title_prefix}{paper}", rule, table.quantities,
                     table.runs, effects, PAPER_VALUES.get(key, {}), notes or [], settings(cfg), cfg.test_claims,
                     decide=decide)

    def absent(self, key: str, paper: str, why: str) -> Claim:
        """A claim this profile cannot test (a run or group it lacks): no numbers, the verdict "not tested"."""
        return Claim(f"{self.key_prefix}{key}", "", f"{self.title_prefix}{paper}", f"not tested in this profile: {why}",
                     {}, {}, [], PAPER_VALUES.get(key, {}), [], settings(self.cfg), self.cfg.test_claims, why)


def settings(cfg: ReportConfig) -> Settings:
    return Settings(cfg.confidence, cfg.permutations, cfg.permutation_seed)


def difference(label: str, a: str, b: str, direction: str, op: str = ">") -> Effect:
    """mean(a) - mean(b) of two arms, whose direction (`op` 0) is the statement, by a rank test."""
    return Effect(label, (a, b), direction=direction, op=op)


def mean_of(label: str, a: str, statement: str, op: str, threshold: float,
            bounds: tuple[float, float] = (-math.inf, math.inf)) -> Effect:
    """mean(a) of one run, `op` threshold, read off its t interval; `bounds`: the values a can take."""
    return Effect(label, (a,), (1.0,), magnitude=statement, op=op, threshold=threshold, bounds=bounds)


def group_context(group: str, cfg: ReportConfig, model: str) -> Context:
    """Keys <group>/<claim> for a group other than `imdb`; titles prefixed with its base model (`model`, as
    Inputs.model_of names it) where there are several IMDB groups or it is not `imdb`."""
    named = group != "imdb" or len(cfg.imdb_groups) > 1
    return Context(cfg, "" if group == "imdb" else f"{group}/", f"{model}: " if named else "")


def figure_of(ctx: Context, name: str) -> str:
    """The figure of a claim: the report draws every figure for the `imdb` group, and for each other IMDB group its
    Fig. 3 (fig3_<group>.png), Fig. 6 and partner-reward figure (fig6_ablations_<group>.png,
    fig_coop_vs_comp_<group>.png, where it ran those runs); other figures' claims of those groups have none."""
    if not ctx.key_prefix:
        return name
    group = ctx.key_prefix.rstrip("/")
    own = {"fig3_imdb.png": f"fig3_{group}.png", "fig6_ablations.png": f"fig6_ablations_{group}.png",
           "fig_coop_vs_comp.png": f"fig_coop_vs_comp_{group}.png"}
    return own.get(name, "")
