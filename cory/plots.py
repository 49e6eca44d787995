"""The paper's figures as matplotlib PNGs: plain arrays in, one file out (no run folders, no pandas).

Every curve is a `Series`: a mean over seeds with its std drawn as a shaded band (no band for a single seed). A
model keeps the same colour and line style in every figure (`STYLES`), so PPO, CORY-LLM1, CORY-LLM2 ... read the
same way across Figs. 3-6; a legend is drawn once per figure, below the panels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on the GPU machine or in CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

STYLES: dict[str, tuple[str, str, str]] = {
    # label -> (colour, line style, marker)
    "PPO": ("tab:blue", "-", "o"),
    "PPO-2x": ("tab:purple", "-.", "D"),
    "CORY-LLM1": ("tab:red", "-", "s"),
    "CORY-LLM2": ("tab:orange", "--", "^"),
    "base": ("tab:gray", ":", "x"),
    "CORY w/o KT (LLM1)": ("tab:green", "--", "v"),
    "CORY w/o REx, pioneer": ("tab:brown", "-.", "P"),
    "CORY w/o REx, observer": ("tab:pink", ":", "X"),
    "LLM1, cooperative": ("tab:red", "-", "s"),
    "LLM1, competitive": ("tab:cyan", "--", "v"),
}
_FALLBACK = [("tab:cyan", "--", "h"), ("tab:olive", "-.", "*"), ("black", ":", "d"), ("tab:green", "-", "<")]


def style(label: str, index: int) -> tuple[str, str, str]:
    """(colour, line style, marker) of a series: the fixed style of its label, or of the label without its
    parenthesised note ("LLM1, cooperative (c = 1)"), else the index-th fallback."""
    return STYLES.get(label) or STYLES.get(label.split(" (")[0]) or _FALLBACK[index % len(_FALLBACK)]


@dataclass
class Series:
    """One curve: mean over seeds at each x, with the std over seeds (None or n_seeds 1: no band)."""

    label: str
    x: np.ndarray
    mean: np.ndarray
    std: np.ndarray | None = None
    n_seeds: int = 1


@dataclass
class Panel:
    """One subplot: its curves and axis labels."""

    title: str
    ylabel: str
    series: list[Series]
    xlabel: str = "iteration"


@dataclass
class FrontierPoint:
    """A run's final (task reward, KL), mean and std over seeds, at KL coefficient eta."""

    eta: float
    reward: float
    reward_std: float
    kl: float
    kl_std: float


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def _legend_below(fig, axes) -> None:
    """One legend for the whole figure (every panel shows the same models), under the panels."""
    handles, labels = {}, []
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in handles:
                handles[label] = handle
                labels.append(label)
    ncol = len(labels) if len(labels) <= 4 else math.ceil(len(labels) / 2)
    fig.legend([handles[l] for l in labels], labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=ncol, frameon=False, fontsize=10)


def _draw(ax, series: Series, index: int, markers: bool = False) -> None:
    colour, linestyle, marker = style(series.label, index)
    x, mean = np.asarray(series.x, float), np.asarray(series.mean, float)
    label = series.label if series.n_seeds <= 1 else f"{series.label} ({series.n_seeds} seeds)"
    # Markers on short curves only: on 100 iterations they would hide the line.
    ax.plot(x, mean, color=colour, linestyle=linestyle, linewidth=1.8, label=label,
            marker=marker if markers or len(x) <= 12 else None, markersize=5)
    if series.std is not None and series.n_seeds > 1:
        std = np.asarray(series.std, float)
        ax.fill_between(x, mean - std, mean + std, color=colour, alpha=0.18, linewidth=0)


def curves_figure(panels: list[Panel], title: str, path: str | Path) -> Path:
    """Panels side by side, each with mean +/- std curves over x (Figs. 3, 4, 6 and the cooperation figure)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for i, series in enumerate(panel.series):
            _draw(ax, series, i)
        ax.set_title(panel.title, fontsize=11)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are whole numbers
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    _legend_below(fig, axes)
    return _save(fig, path)


def pareto_figure(frontiers: dict[str, list[FrontierPoint]], title: str, path: str | Path,
                  annotated: tuple[str, ...] | None = None) -> Path:
    """Fig. 2(c): final task reward (x) against -KL (y), one point per eta with std error bars, joined by eta.

    The points of the frontiers named in `annotated` (all if None) are labelled with their eta."""
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for i, (label, points) in enumerate(frontiers.items()):
        colour, linestyle, marker = style(label, i)
        points = sorted(points, key=lambda p: p.eta)
        ax.errorbar([p.reward for p in points], [-p.kl for p in points],
                    xerr=[p.reward_std for p in points], yerr=[p.kl_std for p in points],
                    color=colour, linestyle=linestyle, marker=marker, markersize=7, capsize=3, label=label)
        for p in points if annotated is None or label in annotated else []:
            ax.annotate(f"η={p.eta:g}", (p.reward, -p.kl), textcoords="offset points", xytext=(6, 6 - 14 * i),
                        fontsize=8, color=colour)
    ax.set_xlabel("task reward after training (higher is better)")
    ax.set_ylabel(r"$-$KL$(\pi_\theta \,\|\, \pi_0)$ after training (higher is better)")
    ax.set_title(title, fontsize=12)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def passk_figure(curves: list[Series], title: str, path: str | Path) -> Path:
    """Fig. 5: pass@k against k on a log2 axis, one curve per model, mean +/- std over training seeds."""
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for i, series in enumerate(curves):
        _draw(ax, series, i, markers=True)
    ax.set_xscale("log", base=2)
    ks = sorted({int(k) for series in curves for k in series.x})
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("pass@k")
    ax.set_title(title, fontsize=12)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=10)
    fig.tight_layout()
    return _save(fig, path)
