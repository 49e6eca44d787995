"""The report's figures say what they show: bands within the seeds' range, no constant panel, eta labels apart,
the combined reward's eta stated. Figures are inspected as matplotlib objects, before saving."""

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.text import Text
from report_fixtures import load_fixture, run_of, write_fixture

from cory.report import plots
from cory.report.config import ReportConfig
from cory.report.figures import draw_figures, series
from cory.report.markdown import report_markdown


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """The figures of a fixture whose CORY KL differs wildly between seeds (0.1, 0.1, 12): mean - std < 0."""
    outputs = tmp_path_factory.mktemp("figures") / "outputs"
    write_fixture(outputs, cory_kl={0: 0.1, 1: 0.1, 2: 12.0})
    inputs = load_fixture(outputs)
    yield inputs, draw_figures(inputs, ReportConfig())
    plt.close("all")


def bands(ax) -> list[np.ndarray]:
    """The (N, 2) outline of every shaded band of an axes."""
    return [path.vertices for c in ax.collections if isinstance(c, PolyCollection) for path in c.get_paths()]


def test_a_band_spans_the_seeds_so_kl_stays_nonnegative(drawn):
    kl = {0: np.zeros(5), 1: np.zeros(5), 2: np.full(5, 9.0)}  # mean 3, std 4.2: mean - std would be -1.2
    line = series(run_of({s: {"llm1/kl": y} for s, y in kl.items()}), "llm1/kl", "PPO")
    assert np.all(line.low == 0) and np.all(line.high == 9) and np.allclose(line.mean, 3)
    inputs, figures = drawn
    for name in ("fig3_imdb", "fig4_math", "fig6_ablations", "fig_coop_vs_comp"):
        kl_panel = figures[name].figure.axes[1]
        assert kl_panel.get_title().startswith("(b) KL divergence")
        outlines = bands(kl_panel)
        assert outlines and min(o[:, 1].min() for o in outlines) >= 0, name
    # the CORY band reaches the highest seed's KL and the lowest seed's, nothing beyond
    cory = series(inputs.runs["imdb"]["cory"], "llm1/kl", "CORY-LLM1")
    assert cory.low.min() == pytest.approx(0.0) and cory.low[-1] < 0.2 and cory.high[-1] > 11
    for name, (figure, caption) in figures.items():  # every figure says what its band is
        words = figure.texts[0].get_text() if figure.texts else figure.axes[0].get_title()
        assert "lowest to highest seed" in words and "lowest to highest seed" in caption, name
    passk = figures["fig5_passk"].figure.axes[0]
    assert all(0 <= o[:, 1].min() and o[:, 1].max() <= 1 for o in bands(passk))


def test_pareto_error_bars_span_the_seeds(drawn):
    _, figures = drawn
    ax = figures["fig2c_pareto"].figure.axes[0]
    segments = [s for c in ax.collections for s in getattr(c, "get_segments", list)()]
    assert segments and max(s[:, 1].max() for s in segments) <= 0  # y = -KL: no bar crosses KL = 0
    point = plots.FrontierPoint(0.1, 1.0, (0.5, 2.0), 3.0, (0.0, 9.0))
    fig = plots.pareto_figure({"PPO": [point]}, "t")
    bars = [s for c in fig.axes[0].collections for s in c.get_segments()]
    assert sorted(tuple(np.ptp(s, axis=0)) for s in bars) == [(0.0, 9.0), (1.5, 0.0)]  # the ranges, asymmetric
    plt.close(fig)


def test_no_panel_draws_the_same_line_for_every_method(drawn):
    # response length is the sampler's (10 tokens in the fixture, for every method): it must not be a panel
    _, figures = drawn
    titles = [ax.get_title() for ax in figures["fig_diversity"].figure.axes]
    assert titles == ["(a) distinct-1 of the responses", "(b) distinct-2 of the responses", "(c) policy entropy"]
    for name, (figure, _) in figures.items():
        for ax in figure.axes:
            curves = [np.asarray(line.get_ydata(), float) for line in ax.lines if len(line.get_ydata()) > 1]
            if len(curves) > 1:
                assert any(not np.allclose(curves[0], c) for c in curves[1:]), (name, ax.get_title())


def overlapping_labels(ax) -> list[tuple[str, str]]:
    renderer = ax.figure.canvas.get_renderer()
    boxes = []
    for text in ax.texts:
        text.get_window_extent(renderer)  # places the annotation; its text alone, without the leader line:
        boxes.append((text.get_text(), Text.get_window_extent(text)))
    frame = ax.get_window_extent(renderer)
    assert all(frame.contains(*box.p0) and frame.contains(*box.p1) for _, box in boxes)
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:] if box_a.overlaps(box_b)]


def test_eta_labels_of_the_pareto_figure_do_not_overlap():
    # Three frontiers on top of each other, and two etas of each at one point: fixed offsets stack the labels
    def frontier(shift):
        return [plots.FrontierPoint(eta, reward + shift, (reward, reward + 2 * shift), kl, (kl - 1, kl + 1))
                for eta, reward, kl in ((0.01, 3.0, 30.0), (0.03, 3.0, 30.0), (0.1, 2.0, 20.0), (0.3, 1.0, 3.0))]

    frontiers = {"PPO": frontier(0.0), "CORY-LLM1": frontier(0.01), "CORY-LLM2": frontier(0.02)}
    fig = plots.pareto_figure(frontiers, "t")
    ax = fig.axes[0]
    assert sorted(t.get_text() for t in ax.texts) == sorted(["η=0.01", "η=0.03", "η=0.1", "η=0.3"] * 3)
    assert overlapping_labels(ax) == []
    plt.close(fig)


def test_pareto_labels_of_the_report_do_not_overlap(drawn):
    _, figures = drawn
    for name in ("fig2c_pareto", "fig2c_pareto_math"):
        ax = figures[name].figure.axes[0]
        assert len(ax.texts) == 3 * 3 and overlapping_labels(ax) == [], name  # 3 etas x PPO, CORY-LLM1, CORY-LLM2


def test_each_tasks_frontier_is_drawn_from_its_own_sweep(drawn):
    inputs, figures = drawn
    imdb, maths = figures["fig2c_pareto"], figures["fig2c_pareto_math"]
    assert imdb.figure.axes[0].get_xlabel() == "task reward (sentiment logit) after training, higher is better"
    assert maths.figure.axes[0].get_xlabel() == "task reward (share correct) after training, higher is better"
    assert "math word problems" in maths.figure.axes[0].get_title() and "IMDB" in imdb.figure.axes[0].get_title()
    # the math sweep runs 2 of the 3 seeds (its group's own seeds): its figure says so
    assert "mean of 2 seeds" in maths.figure.axes[0].get_title()
    assert "mean of 3 seeds" in imdb.figure.axes[0].get_title()
    assert "(group `pareto_math`)" in maths.caption and "the mean of 2 seeds" in maths.caption
    # the points are the math sweep's final values: PPO at eta 0.3 has share correct (0.5 - 0.3) x seed scale
    ppo = maths.figure.axes[0].lines[0]  # the error bars' points, in order of KL
    ppo_runs = inputs.sweeps["math"].runs["ppo"]
    rewards = [np.mean([y[-10:].mean() for y in ppo_runs[eta].curves("llm1/task_reward").values()])
               for eta in (0.01, 0.1, 0.3)]
    np.testing.assert_allclose(sorted(ppo.get_xdata()), sorted(rewards))
    assert rewards[-1] == pytest.approx(0.2 * 1.01, rel=0.01)


def test_combined_reward_panels_state_their_eta(drawn, tmp_path):
    inputs, figures = drawn
    assert figures["fig3_imdb"].figure.axes[2].get_title() == "(c) combined reward, η = 0.3"
    assert figures["fig4_math"].figure.axes[2].get_title() == "(c) combined reward, η = 0.01"
    assert "r - η·KL (η = 0.3; train.combined_reward_eta, else ppo.init_kl_coef)" in figures["fig3_imdb"].caption
    text = report_markdown(inputs, [], ReportConfig(), "fixture", {n: d.caption for n, d in figures.items()})
    assert "(η = 0.01; train.combined_reward_eta, else ppo.init_kl_coef)" in text
    # train.combined_reward_eta, where set, is the eta (not ppo.init_kl_coef), run by run
    outputs = tmp_path / "outputs"
    write_fixture(outputs, seeds=(0,), iterations=4)
    for config in (outputs / "runs" / "imdb" / "cory").glob("seed*/config.json"):
        config.write_text(json.dumps({**json.loads(config.read_text()), "combined_reward_eta": 0.05}))
    title = draw_figures(load_fixture(outputs), ReportConfig())["fig3_imdb"].figure.axes[2].get_title()
    assert title == "(c) combined reward, η = 0.3 (PPO), 0.3 (PPO-2x), 0.05 (CORY-LLM1), 0.05 (CORY-LLM2)"
    plt.close("all")


def test_the_probe_panel_draws_only_the_iterations_the_probe_ran():
    from cory.report.figures import probe_panel

    probed = np.full(30, np.nan)
    probed[[0, 10, 20, 29]] = [0.2, 0.25, 0.3, 0.32]
    seeds = {s: {"llm1/task_reward": np.linspace(0.2, 0.3, 30), "llm1/probe_task_reward": probed + 0.01 * s}
             for s in (0, 1)}
    panel = probe_panel([(run_of(seeds), "llm1", "PPO"), (run_of(seeds), "llm2", "CORY-LLM2")], "math")
    (line,) = panel.series  # LLM1's alone: the probe is LLM1 used alone
    assert list(line.x) == [0, 10, 20, 29]
    np.testing.assert_allclose(line.mean, [0.205, 0.255, 0.305, 0.325])
    unprobed = {s: {"llm1/task_reward": np.linspace(0.2, 0.3, 30)} for s in (0, 1)}
    assert probe_panel([(run_of(unprobed), "llm1", "PPO")], "math") is None  # runs without the probe: no panel


def test_a_front_joins_the_non_dominated_points_in_order_of_kl_and_marks_the_others():
    """Joined in order of eta, a series whose KL does not fall with eta zigzags and crosses the others: a front is
    drawn through the points no other point of its series beats on both task reward and KL."""
    def point(eta, reward, kl):
        return plots.FrontierPoint(eta, reward, (reward, reward), kl, (kl, kl))

    points = [point(0.01, 3.0, 30.0), point(0.03, 2.0, 35.0), point(0.1, 2.5, 10.0), point(0.3, 1.0, 3.0)]
    assert [p.eta for p in plots.front(points)] == [0.3, 0.1, 0.01]  # eta 0.03 is beaten by 0.01 on both
    fig = plots.pareto_figure({"PPO": points}, "t")
    ax = fig.axes[0]
    joined = [line for line in ax.lines if line.get_linestyle() not in ("None", "none", "")]
    (front,) = joined
    np.testing.assert_allclose(front.get_xdata(), [1.0, 2.5, 3.0])  # sorted by KL: 3, 10, 30
    np.testing.assert_allclose(front.get_ydata(), [-3.0, -10.0, -30.0])
    hollow = [line for line in ax.lines if line.get_markerfacecolor() == "white" and len(line.get_xdata())]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [2.0]
    labels = fig.legends[0].get_texts()
    assert "dominated within its series" in [t.get_text() for t in labels]
    plt.close(fig)


def test_fig6_draws_one_row_per_ablation_against_cory(drawn):
    _, figures = drawn
    axes = figures["fig6_ablations"].figure.axes
    assert [ax.get_title() for ax in axes] == ["(a) task reward, w/o KT", "(b) KL divergence, w/o KT",
                                               "(c) task reward, w/o REx", "(d) KL divergence, w/o REx"]
    for ax in axes:  # CORY-LLM1 and the ablation's curves with bands; PPO a thin line without one
        labels = [line.get_label() for line in ax.lines]
        assert labels[0].startswith("CORY-LLM1") and labels[-1].startswith("PPO")
        assert len(bands(ax)) == len(labels) - 1 <= 3
