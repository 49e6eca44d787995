"""The role-swap claim and its figure: without role exchange, an agent's reward in the role it did not play falls;
with it, it does not.

Each CORY run whose task holds prompts out of training (tasks.<task>.held_out) writes role_swap.json after training
(cory.rl.role_swap): every agent's mean task reward in each role on the held-out prompts, as trained and with the
agents swapped, and each role's `swap_change`, the reward of the role played by the agent that did not play it last
less that of the agent that did. The claim reads the `cory` and `cory_no_rex` runs of each IMDB group of
report.imdb_groups; a group whose runs did not take the test (tasks.<task>.held_out 0) gets no claim, one with only
one of the two runs gets a claim that is not measurable, saying which is missing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cory.files import read_json
from cory.report.curves import final_value
from cory.report.quantities import Context, Table, group_context, mean_of
from cory.report.results import Inputs, Run
from cory.report.verdicts import Claim, PerSeed

if TYPE_CHECKING:
    from cory.report.config import ReportConfig

ROLES = ("pioneer", "observer")
RUNS = {"cory": "CORY", "cory_no_rex": "w/o REx"}
"""The runs the claim compares -> how it names them."""
FILE = "role_swap.json"

PAPER = ("Without role exchange, an agent's task reward in the role it did not play falls; with role exchange, it "
         "does not (this reproduction's role-swap test, not a figure of the paper).")


def took_the_test(runs_dir: Path, run: Run) -> bool:
    """Whether a run took the role-swap test: some seed wrote role_swap.json, or its task held prompts out
    (tasks.<task>.held_out: samples.jsonl holds their answers), which a CORY run answers in swapped roles."""
    return (any((runs_dir / run.name / f"seed{seed}" / FILE).is_file() for seed in run.seeds)
            or any(row.get("held_out") for rows in run.samples_by_seed.values() for row in rows))


def role_swaps(runs_dir: Path, run: Run) -> dict[int, dict] | None:
    """seed -> the run's role_swap.json, for a run that took the test (`took_the_test`); None for one that did not.
    A seed without the file is one FileNotFoundError naming it."""
    if not took_the_test(runs_dir, run):
        return None
    swaps = {}
    for seed in run.seeds:
        path = runs_dir / run.name / f"seed{seed}" / FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found (the run's task holds prompts out, tasks.<task>.held_out, so "
                                    "a CORY run writes this file after training: did it finish?)")
        swaps[seed] = read_json(path)
    return swaps


def group_swaps(runs_dir: Path, group: dict[str, Run]) -> dict[str, dict[int, dict] | None]:
    """run name -> its seeds' role_swap.json (None: the run is absent or did not take the test), for RUNS."""
    return {name: role_swaps(runs_dir, group[name]) if name in group else None for name in RUNS}


def _number(value) -> float:
    return math.nan if value is None else float(value)


def played_by(swap: dict, role: str, last: bool) -> str:
    """The agent that played `role` last (`last`), or the other one."""
    agent = next(name for name, played in swap["last_role"].items() if played == role)
    return agent if last else next(name for name in swap["last_role"] if name != agent)


def rewards(swaps: dict[int, dict], role: str, last: bool) -> PerSeed:
    """seed -> the mean task reward in `role` of the agent that played it last (or of the other one)."""
    return {s: _number(d["task_reward"][played_by(d, role, last)][role]) for s, d in swaps.items()}


def role_swap_claim(group: str, runs: dict[str, Run], swaps: dict[str, dict[int, dict] | None],
                    ctx: Context) -> Claim | None:
    """The claim for one IMDB group (None where neither run took the test): per role, the mean swap change of the
    run without role exchange < 0, and CORY's mean swap change > -report.tolerance x |PPO's mean task-reward gain
    (final - iteration 0)|, the margin taken as known."""
    if all(s is None for s in swaps.values()):
        return None
    figure = f"fig_role_swap_{group}.png"
    missing = [name for name, s in swaps.items() if s is None]
    if missing:
        why = ", ".join(f"`{group}/{name}` " + ("is no run of the group" if name not in runs else
                                               "took no role-swap test (tasks.<task>.held_out 0)") for name in missing)
        return ctx.claim("role_swap", "", PAPER, f"not measured: {why}; the claim compares "
                         f"{' and '.join(RUNS)} on the held-out prompts.", Table(), [])
    cfg, ppo = ctx.cfg, runs["ppo"]
    t = Table()
    gain = t.add("PPO task-reward gain (final - iteration 0)", ppo,
                 ppo.per_seed("llm1/task_reward", lambda y: final_value(y, cfg.last_n) - y[0]))
    change = {}
    for name, label in RUNS.items():
        for role in ROLES:
            t.add(f"{label}, {role} role: task reward of the agent that played it last", runs[name],
                  rewards(swaps[name], role, True))
            t.add(f"{label}, {role} role: task reward of the other agent", runs[name],
                  rewards(swaps[name], role, False))
            change[label, role] = t.add(f"{label}, {role} role: swap change (other agent - last player)", runs[name],
                                        {s: _number(d["swap_change"][role]) for s, d in swaps[name].items()})
    gains = [g for g in t.quantities[gain].values() if math.isfinite(g)]
    margin = cfg.tolerance * abs(float(np.mean(gains))) if gains else math.nan
    effects = [mean_of(f"w/o REx, {role} role: mean swap change", change["w/o REx", role],
                       f"without role exchange, the {role} role's task reward falls when the agents swap", "<", 0.0)
               for role in ROLES]
    effects += [mean_of(f"CORY, {role} role: mean swap change", change["CORY", role],
                        f"with role exchange, the {role} role's task reward falls by less than {cfg.tolerance:g} x "
                        f"PPO's task-reward gain ({margin:.3g}) when the agents swap", ">", -margin) for role in ROLES]
    queries = sorted({d["queries"] for s in swaps.values() for d in s.values()})
    return ctx.claim(
        "role_swap", figure, PAPER,
        f"on the {'/'.join(map(str, queries))} held-out prompts (tasks.<task>.held_out), the swap change of a role is "
        "the mean task reward of the role played by the agent that did not play it last less that of the agent that "
        "did (role_swap.json); for the pioneer and the observer role: the mean swap change without role exchange "
        f"< 0, and CORY's > -{cfg.tolerance:g} x |PPO's mean task-reward gain (final - iteration 0)| (the margin "
        f"taken as known: {margin:.3g}), each by its {cfg.confidence:.0%} t interval.",
        t, effects)


def role_swap_claims(outputs: Path, inputs: Inputs, cfg: ReportConfig) -> list[Claim]:
    """The role-swap claim of each IMDB group of report.imdb_groups whose runs took the test."""
    claims = []
    for group in cfg.imdb_groups:
        runs = inputs.runs[group]
        claim = role_swap_claim(group, runs, group_swaps(outputs / "runs", runs),
                                group_context(group, cfg, inputs.model_of(group)))
        if claim is not None:
            claims.append(claim)
    return claims


def role_swap_figures(outputs: Path, inputs: Inputs, cfg: ReportConfig) -> dict:
    """fig_role_swap_<group>: per IMDB group whose cory or cory_no_rex run took the test, each role's task reward on
    the held-out prompts when played by the agent that played it last and by the other agent (name -> Drawn)."""
    from cory.report.figures import Drawn

    figures = {}
    for group in cfg.imdb_groups:
        runs = inputs.runs[group]
        swaps = {RUNS[name]: s for name, s in group_swaps(outputs / "runs", runs).items() if s is not None}
        if swaps:
            model = inputs.model_of(group)
            n = min(len(s) for s in swaps.values())
            figures[f"fig_role_swap_{group}"] = Drawn(
                role_swap_figure(swaps, f"Role-swap test on {model} (group `{group}`):\neach role's task reward on "
                                 f"held-out prompts ({_over(n)})"),
                f"Role-swap test (group `{group}`): after training, each role played on held-out prompts by the agent "
                "that played it last and by the other agent (role_swap.json). Bars: the mean over seeds"
                + (f"; error bars: the lowest to the highest seed." if n > 1 else "; one seed: no error bars."))
    return figures


def _over(n: int) -> str:
    return f"mean of {n} seeds, error bars: lowest to highest seed" if n > 1 else "1 seed"


def role_swap_figure(swaps: dict[str, dict[int, dict]], title: str):
    """Grouped bars: one group per (run, role), the agent that played the role last beside the other agent."""
    from cory.report import plots  # matplotlib: only where a figure is drawn

    fig = plots.plt.figure(figsize=(2.2 + 2.0 * len(swaps) * len(ROLES), 3.8))
    ax = fig.add_subplot(1, 1, 1)
    slots = [(label, role) for label in swaps for role in ROLES]
    width = 0.38
    for offset, last, name, colour in ((-width / 2, True, "the agent that played the role last", "tab:red"),
                                       (width / 2, False, "the other agent", "tab:gray")):
        values = [list(rewards(swaps[label], role, last).values()) for label, role in slots]
        means = np.array([np.nanmean(v) for v in values])
        low, high = np.array([np.nanmin(v) for v in values]), np.array([np.nanmax(v) for v in values])
        x = np.arange(len(slots)) + offset
        ax.bar(x, means, width, color=colour, alpha=0.85, label=name)
        if max(len(v) for v in values) > 1:
            ax.errorbar(x, means, yerr=[means - low, high - means], fmt="none", ecolor="black", capsize=3, linewidth=1)
    ax.set_xticks(np.arange(len(slots)), [f"{label}\n{role} role" for label, role in slots])
    ax.set_ylabel("task reward, held-out prompts")
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=9, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)
    ax.set_title(title, fontsize=11)
    fig.tight_layout()
    return fig
