"""The paper's figures as matplotlib figures: plain arrays in, one `Figure` out, written by `save` (no run folders,
no pandas).

Every curve is a `Series`: the mean over seeds with a shaded band from the lowest to the highest seed (no band for a
single seed). A min-max band, unlike mean +/- std, never leaves the range the quantity can take: a KL band stays above
0, a pass@k band inside [0, 1]. A model keeps the same colour and line style in every figure (`STYLES`), so PPO,
CORY-LLM1, CORY-LLM2 ... read the same way across Figs. 3-6; a legend is drawn once per figure, below the panels.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on the GPU machine or in CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Annotation  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from cory.files import atomic_write  # noqa: E402

BAND = "lowest to highest seed"
"""What every shaded band and error bar spans (for titles and captions)."""

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
    """One curve: the mean over seeds at each x, with the band [low, high] (lowest and highest seed; None or
    n_seeds 1: no band)."""

    label: str
    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    n_seeds: int = 1
    reference: bool = False
    """A curve to read the others against (PPO beside the ablations): a thin line, no band."""


@dataclass
class Panel:
    """One subplot: its curves and axis labels."""

    title: str
    ylabel: str
    series: list[Series]
    xlabel: str = "iteration"


@dataclass
class FrontierPoint:
    """A run's final (task reward, KL) at KL coefficient eta: the mean over seeds and the lowest and highest seed."""

    eta: float
    reward: float
    reward_range: tuple[float, float]
    kl: float
    kl_range: tuple[float, float]


def save(fig: Figure, path: str | Path) -> Path:
    """Write the figure as a PNG, atomically (a reader sees the old file or the new one), and close it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    atomic_write(path, buffer.getvalue())
    return Path(path)


def _legend_below(fig, axes) -> None:
    """One legend for the whole figure (every panel shows the same models), under the panels."""
    handles, labels = {}, []
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in handles:
                handles[label] = handle
                labels.append(label)
    if not labels:  # nothing drawn (e.g. no KL level every run crosses): nothing to name
        return
    ncol = len(labels) if len(labels) <= 4 else math.ceil(len(labels) / 2)
    fig.legend([handles[l] for l in labels], labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=ncol, frameon=False, fontsize=10)


def _draw(ax, series: Series, index: int, markers: bool = False) -> None:
    colour, linestyle, marker = style(series.label, index)
    x, mean = np.asarray(series.x, float), np.asarray(series.mean, float)
    label = series.label if series.n_seeds <= 1 else f"{series.label} ({series.n_seeds} seeds)"
    # Markers on short curves only: on 100 iterations they would hide the line.
    ax.plot(x, mean, color=colour, linestyle=linestyle, linewidth=1.0 if series.reference else 1.8, label=label,
            marker=marker if markers or len(x) <= 12 else None, markersize=5, alpha=0.8 if series.reference else 1)
    if series.low is not None and series.high is not None and series.n_seeds > 1 and not series.reference:
        ax.fill_between(x, np.asarray(series.low, float), np.asarray(series.high, float), color=colour, alpha=0.18,
                        linewidth=0)


def curves_figure(panels: list[Panel] | list[list[Panel]], title: str) -> Figure:
    """Panels side by side, each with mean curves and min-max bands over x (Figs. 3, 4, cooperation, diversity); a
    list of rows of panels draws one row each (Fig. 6: an ablation per row, against the same CORY curve, so that no
    panel stacks more than three bands)."""
    rows = panels if panels and isinstance(panels[0], list) else [panels]
    ncols = max(len(row) for row in rows)
    fig, axes = plt.subplots(len(rows), ncols, figsize=(5.0 * ncols, 3.6 * len(rows) + 0.2), squeeze=False)
    for row, row_axes in zip(rows, axes):
        for ax, panel in zip(row_axes, row):
            for i, series in enumerate(panel.series):
                _draw(ax, series, i)
            ax.set_title(panel.title, fontsize=11)
            ax.set_xlabel(panel.xlabel)
            ax.set_ylabel(panel.ylabel)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are whole numbers
            ax.grid(alpha=0.3)
        for ax in row_axes[len(row):]:
            ax.set_visible(False)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    _legend_below(fig, axes)
    return fig


# --------------------------------------------------------------------------------------------------------------------
# Fig. 2(c): the Pareto frontiers, with eta labels that do not overlap
# --------------------------------------------------------------------------------------------------------------------

MARKER_SIZE = 7
"""Marker size (points) of the frontier points."""
_DIRECTIONS = [(1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1)]
_DISTANCES = (5, 12, 22, 34)
"""Offsets (points) of a label from its point tried by `place_labels`; beyond the second, a leader line is drawn."""


def _overlap(box: np.ndarray, boxes: np.ndarray) -> float:
    """Summed area (pixels^2) of the overlap of `box` (x0, y0, x1, y1) with each row of `boxes` (N, 4)."""
    w = np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0])
    h = np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1])
    return float(np.sum(np.clip(w, 0, None) * np.clip(h, 0, None)))


def _squares(xy: np.ndarray, half: float) -> np.ndarray:
    """(N, 4) boxes of side 2 * half around the pixel positions xy (N, 2)."""
    return np.hstack([xy - half, xy + half]) if len(xy) else np.zeros((0, 4))


def _line_points(ax, step: float = 4.0) -> np.ndarray:
    """Pixel positions every `step` pixels along every line of the axes (curves and error bars), (N, 2)."""
    polylines = [line.get_transform().transform(line.get_xydata()) for line in ax.lines]
    for collection in ax.collections:  # error bars: one segment per bar
        polylines += [ax.transData.transform(segment) for segment in getattr(collection, "get_segments", list)()]
    points = [np.zeros((0, 2))]
    for xy in polylines:
        for a, b in zip(xy[:-1], xy[1:]):
            n = max(int(np.hypot(*(b - a)) // step), 1)
            points.append(a + np.linspace(0, 1, n + 1)[:, None] * (b - a))
    return np.vstack(points)


def place_labels(ax, labels: list[tuple[float, float, str, str]], avoid: list[tuple[float, float]]) -> list[Annotation]:
    """Label data points (x, y, text, colour) next to them without covering each other, the axes' edge or a marker
    (at `avoid`), and preferably close to their point and off the lines.

    Greedy: each label takes, of 8 directions x 4 distances around its point, the position of least cost: overlap
    with the labels placed so far, the markers and the outside of the axes first (any of it outweighs the rest),
    then overlap with thin boxes along the lines, then distance. A label set far off gets a thin leader line to
    its point. The axes must be laid out first (limits and position fixed): the boxes are in pixels."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    frame = np.array([[frame.x0, frame.y0, frame.x1, frame.y1]])
    points_px = fig.dpi / 72
    hard = _squares(ax.transData.transform(np.asarray(avoid, float).reshape(-1, 2)), MARKER_SIZE / 2 * points_px + 1)
    lines = _squares(_line_points(ax), 1.5)
    placed = []
    for x, y, text, colour in labels:
        probe = ax.annotate(text, (x, y), fontsize=8)
        size = probe.get_window_extent(renderer).size + 2  # 1 pixel of padding on each side
        probe.remove()
        px, py = ax.transData.transform((x, y))
        best = None
        for distance in _DISTANCES:
            for dx, dy in _DIRECTIONS:
                # the text's anchor corner sits at the offset: left/centre/right, bottom/centre/top by direction
                x0 = px + dx * distance * points_px - (1 - dx) / 2 * size[0]
                y0 = py + dy * distance * points_px - (1 - dy) / 2 * size[1]
                box = np.array([x0, y0, x0 + size[0], y0 + size[1]])
                outside = size[0] * size[1] - _overlap(box, frame)
                cost = 1e6 * (outside + _overlap(box, hard)) + _overlap(box, lines) + 4 * distance
                if best is None or cost < best[0]:
                    best = (cost, box, distance, dx, dy)
        _, box, distance, dx, dy = best
        leader = dict(arrowprops=dict(arrowstyle="-", color=colour, linewidth=0.6, alpha=0.7, shrinkA=0, shrinkB=4)
                      ) if distance > _DISTANCES[1] else {}
        placed.append(ax.annotate(text, (x, y), xytext=(dx * distance, dy * distance), textcoords="offset points",
                                  fontsize=8, color=colour, ha={1: "left", 0: "center", -1: "right"}[dx],
                                  va={1: "bottom", 0: "center", -1: "top"}[dy], **leader))
        hard = np.vstack([hard, box])
    return placed


def front(points: list[FrontierPoint]) -> list[FrontierPoint]:
    """The points of one series that no other of its points dominates (as high a task reward at as low a KL, one of
    them strictly better), sorted by KL: what joining the points makes a Pareto front."""
    return [p for p in sorted(points, key=lambda p: (p.kl, -p.reward))
            if not any(q.reward >= p.reward and q.kl <= p.kl and (q.reward > p.reward or q.kl < p.kl) for q in points)]


def pareto_figure(frontiers: dict[str, list[FrontierPoint]], title: str,
                  xlabel: str = "task reward after training (higher is better)") -> Figure:
    """Fig. 2(c): final task reward (x, labelled `xlabel`: what the task's reward is) against -KL (y), one point per
    eta with min-max error bars over seeds. Each series' front (`front`: its non-dominated points, in order of KL) is
    joined by a line; a point that another of its series dominates is drawn hollow, off the line (joined in order
    of eta, fronts would zigzag and cross). Every point is labelled with its eta in its series' colour, the labels
    set apart (`place_labels`)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    dominated_seen = False
    for i, (label, points) in enumerate(frontiers.items()):
        colour, linestyle, marker = style(label, i)
        points = sorted(points, key=lambda p: p.kl)
        reward, kl = np.array([p.reward for p in points]), np.array([p.kl for p in points])
        reward_range, kl_range = np.array([p.reward_range for p in points]), np.array([p.kl_range for p in points])
        # error bars are distances below and above the point; the y axis is -KL, so KL's highest seed lies below
        ax.errorbar(reward, -kl, xerr=[reward - reward_range[:, 0], reward_range[:, 1] - reward],
                    yerr=[kl_range[:, 1] - kl, kl - kl_range[:, 0]], color=colour, linestyle="none", capsize=3,
                    alpha=0.6, linewidth=1)
        best = front(points)
        ax.plot([p.reward for p in best], [-p.kl for p in best], color=colour, linestyle=linestyle, marker=marker,
                markersize=MARKER_SIZE, label=label)
        dominated = [p for p in points if p not in best]
        if dominated:
            dominated_seen = True
            ax.plot([p.reward for p in dominated], [-p.kl for p in dominated], linestyle="none", marker=marker,
                    markersize=MARKER_SIZE, markerfacecolor="white", markeredgecolor=colour, markeredgewidth=1.5)
    if dominated_seen:  # what a hollow marker means, once
        ax.plot([], [], linestyle="none", marker="o", markersize=MARKER_SIZE, markerfacecolor="white",
                markeredgecolor="black", label="dominated within its series")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(r"$-$KL$(\pi_\theta \,\|\, \pi_0)$ after training (higher is better)")
    ax.set_title(title, fontsize=12)
    ax.grid(alpha=0.3)
    ax.margins(0.12)  # room for the labels of the outermost points
    ax.set_xlim(ax.get_xlim())  # freeze the autoscaled limits: the labels are placed in pixels
    ax.set_ylim(ax.get_ylim())
    fig.tight_layout()
    _legend_below(fig, ax)  # outside the axes, where no label goes
    every = [(p.reward, -p.kl) for points in frontiers.values() for p in points]
    labels = [(p.reward, -p.kl, f"η={p.eta:g}", style(name, i)[0])
              for i, (name, points) in enumerate(frontiers.items()) for p in sorted(points, key=lambda p: p.eta)]
    place_labels(ax, labels, every)
    return fig


def passk_figure(curves: list[Series], title: str) -> Figure:
    """Fig. 5: pass@k against k on a log2 axis, one curve per model, mean and min-max band over training seeds."""
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
    return fig
