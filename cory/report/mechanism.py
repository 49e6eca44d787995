"""Does CORY beat PPO? The decision rule of the report's headline (docs/claims.md): task reward at matched KL.

One KL coefficient cannot tell a better trade-off from slower learning: each CORY agent trains on the normalised sum
of its own and its partner's reward, which dilutes its own reward much as a larger KL coefficient would, so CORY can
walk PPO's (reward, KL) path later and end at a lower KL without reaching more reward for it. So the rule reads each
run along its path: each seed's task reward and KL curves smoothed over report.stability_window iterations, the
reward where the KL first reaches a level L (linearly interpolated between the two iterations around the crossing),
for each L of a grid every compared seed reaches, averaged over the grid. CORY's curves are its pioneer role's (the
answer to PPO's prompt, whichever LLM gives it), PPO's are its one agent's.

CORY beats PPO where, for every CORY run and every run of PPO's frontier (PPO at two or more KL coefficients), the
per-seed difference of rewards at matched KL is positive by an exact signed-rank test (seeds pair: the runs of one
group share them) and so is the difference from CORY without knowledge transfer (else the gain is dilution, not
cooperation). It did not hold where some difference's interval lies below the smallest effect of interest
(report.mechanism.margin x PPO's task-reward gain); else it is inconclusive.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from cory.report.curves import smooth
from cory.report.quantities import Context, Table
from cory.report.results import Run
from cory.report.stats import HELD, NOT_HELD, INCONCLUSIVE, NOT_MEASURABLE
from cory.report.verdicts import Claim, Effect, PerSeed, Test

if TYPE_CHECKING:
    from cory.report.config import ReportConfig

AUTO_LEVELS = 4
"""Levels of an automatic grid (report.mechanism.kl_levels null, and the eta sweeps)."""


def reward_at_kl(reward: np.ndarray, kl: np.ndarray, level: float, window: int) -> float:
    """The smoothed reward where the smoothed KL first reaches `level`, interpolated linearly between the iterations
    before and at the crossing; NaN where it never does, or where it starts at or above it (no crossing to read)."""
    r, k = smooth(reward, window), smooth(kl, window)
    reached = np.flatnonzero(k >= level)
    if not len(reached) or reached[0] == 0:
        return math.nan
    t = reached[0]
    share = (level - k[t - 1]) / (k[t] - k[t - 1])
    return float(r[t - 1] + share * (r[t] - r[t - 1]))


def path(run: Run) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """seed -> (task reward, KL) over iterations: CORY's pioneer role (where the run logs roles), else LLM1's."""
    who = "pioneer" if all("pioneer/kl" in frame for frame in run.histories.values()) else "llm1"
    rewards, kls = run.curves(f"{who}/task_reward"), run.curves(f"{who}/kl")
    return {seed: (rewards[seed], kls[seed]) for seed in run.seeds}


def shared_levels(runs: list[Run], levels: list[float] | None, window: int) -> list[float]:
    """The levels every seed of `runs` crosses (above its smoothed start, at or below its smoothed maximum): those of
    `levels` that are, or, for None, AUTO_LEVELS levels evenly inside that range (3 significant digits)."""
    curves = [smooth(kl, window) for run in runs for _, kl in path(run).values()]
    if not curves:
        return []
    low, high = max(float(k[0]) for k in curves), min(float(np.max(k)) for k in curves)
    if levels is None:
        grid = np.linspace(low, high, AUTO_LEVELS + 2)[1:-1] if high > low else []
        return [float(f"{x:.3g}") for x in grid]
    return [float(x) for x in levels if low < x <= high]


def matched_reward(run: Run, levels: list[float], window: int) -> PerSeed:
    """seed -> the mean over `levels` of its reward at matched KL (NaN without levels)."""
    return {seed: float(np.mean([reward_at_kl(r, k, x, window) for x in levels])) if levels else math.nan
            for seed, (r, k) in path(run).items()}


def task_gain(run: Run, last_n: int) -> PerSeed:
    """seed -> final task reward (the mean over the last `last_n` iterations) - iteration 0's, along the run's path."""
    return {seed: float(np.mean(r[-last_n:]) - r[0]) for seed, (r, _) in path(run).items()}


def eta(run: Run) -> float:
    return float(run.config.get("ppo", {}).get("init_kl_coef", math.nan))


def frontier_decision(tests: list[Test]) -> str:
    """The rule's verdict from its measurable statements: held where every direction held (each CORY run above every
    frontier run and the control it shares KL levels with) and no margin statement did not hold; did not hold where
    some gain's interval lies below the margin; else inconclusive."""
    tests = [t for t in tests if t.verdict != NOT_MEASURABLE]
    if not tests:
        return NOT_MEASURABLE
    if any(t.kind == "magnitude" and t.verdict == NOT_HELD for t in tests):
        return NOT_HELD
    return HELD if all(t.verdict == HELD for t in tests if t.kind == "direction") else INCONCLUSIVE


def frontier_claim(key: str, figure: str, paper: str, frontier: dict[str, Run], cory: dict[str, Run],
                   control: tuple[str, Run] | None, levels: list[float] | None, margin: float, ctx: Context,
                   where: str) -> Claim:
    """The rule on named runs (name -> Run): each CORY run against each frontier run and the control, one effect
    each (direction: reward at matched KL above; magnitude: by at least the margin)."""
    cfg: ReportConfig = ctx.cfg
    w = cfg.stability_window
    t = Table()
    gains = [g for name, run in frontier.items() for g in t.quantities[
        t.add(f"{name} task-reward gain (final - iteration 0)", run, task_gain(run, cfg.last_n))].values()
        if math.isfinite(g)]
    smallest = margin * abs(float(np.mean(gains))) if gains else math.nan
    effects, notes = [], []
    others = [*frontier.items(), *([control] if control else [])]
    for c_name, c_run in cory.items():
        for o_name, o_run in others:
            shared = shared_levels([c_run, o_run], levels, w)
            pair = f"{c_name} vs {o_name}"
            if not shared:  # KL ranges apart: no matched KL to compare at (other runs cover CORY's range)
                notes.append(f"{pair}: no KL level both cross; not compared.")
                continue
            a = t.add(f"{c_name} reward at matched KL ({pair})", c_run, matched_reward(c_run, shared, w))
            b = t.add(f"{o_name} reward at matched KL ({pair})", o_run, matched_reward(o_run, shared, w))
            what = "CORY without knowledge transfer" if control and o_name == control[0] else "PPO"
            effects.append(Effect(f"{c_name} - {o_name} reward at matched KL", (a, b),
                                  direction=f"{c_name} reaches more task reward than {o_name} ({what}) at matched KL",
                                  magnitude=f"{c_name}'s gain over {o_name} at matched KL is at least {smallest:.3g} "
                                            "(the smallest effect of interest)",
                                  op=">", threshold=smallest))
            notes.append(f"{pair}: KL levels {', '.join(f'{x:g}' for x in shared)}.")
    runs = ", ".join(f"{name} (η {eta(run):g})" for name, run in frontier.items())
    grid = ("report.mechanism.kl_levels" if levels else
            f"automatic: {AUTO_LEVELS} levels evenly inside the range every seed crosses")
    control_text = (f" and {control[0]} (CORY without knowledge transfer: else the gain is dilution)" if control
                    else "")
    rule = (f"each seed's task reward and KL ({where}) smoothed over {w} iterations; the reward where the KL first "
            f"reaches each level of a grid both compared runs cross ({grid}), averaged over the levels; the "
            f"difference CORY - other, seed by seed. PPO's frontier: {runs}. CORY beats PPO where each CORY run "
            f"reaches more reward than every frontier run{control_text}, each by an exact signed-rank test one-sided "
            f"at {(1 - cfg.confidence) / 2:g}; it does not where some difference's {cfg.confidence:.0%} interval lies "
            f"below the smallest effect of interest, {margin:g} x PPO's mean task-reward gain ({smallest:.3g}); "
            "otherwise the seeds cannot tell.")
    return ctx.claim(key, figure, paper, rule, t, effects, notes, decide=frontier_decision)


def mechanism_claim(runs: dict[str, dict[str, Run]], cfg: ReportConfig, ctx: Context) -> Claim:
    """The report's headline: report.mechanism's rule on its group; not tested where params set no rule or the
    group did not run."""
    paper = ("CORY reaches more task reward than PPO for the same KL, and the gain is cooperation, not dilution "
             "(Fig. 2c's frontier, on a pretrained LM)")
    rule = cfg.mechanism
    if rule is None:
        return ctx.absent("mechanism", paper, "report.mechanism names no experiment (PPO at several KL "
                          "coefficients, CORY, CORY without knowledge transfer)")
    group = runs.get(rule.group)
    if group is None:
        return ctx.absent("mechanism", paper, f"experiment group {rule.group!r} did not run")
    frontier = {name: group[name] for name in rule.frontier}
    cory = {name: group[name] for name in rule.cory}
    control = (rule.control, group[rule.control]) if rule.control else None
    return frontier_claim("mechanism", f"fig_frontier_{rule.group}.png", paper, frontier, cory, control,
                          rule.kl_levels, rule.margin, ctx, f"group `{rule.group}`; CORY's pioneer role")
