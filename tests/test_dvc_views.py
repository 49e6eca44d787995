"""DVC's own views of the results: `dvc metrics` reads one small headline file and `dvc plots` shows the report's
figures, both at paths no profile changes (so two revisions line up) and git-tracked (so both work in a fresh clone,
with no DVC remote), and `dvc exp run -S key=value` runs an experiment that `dvc exp show --only-changed` puts in a
terminal-wide table beside its baseline.

The first tests read dvc.yaml and the report stage's writers (cory.report.dvc_views) on the fake run tree of test_report; the
last ones (marked smoke) run the smoke profile through `dvc repro` in a copy of the repository and call DVC itself.
"""

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from cory.report.claims import final_value
from cory.schema import dotted_leaves
from cory.report.dvc_views import write_views
from smoke import clean_env, sh
from report_fixtures import FIGURES, load_fixture, write_fixture

ROOT = Path(__file__).resolve().parents[1]
PROFILE_OUTPUTS = "outputs/${profile}/"


def dvc_yaml() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())


def stage_outputs(kind: str) -> dict[str, dict]:
    """path -> options of every `outs` or `metrics` entry of every stage (foreach stages once, as written)."""
    found = {}
    for stage in dvc_yaml()["stages"].values():
        for entry in stage.get("do", stage).get(kind, []):
            path, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
            found[path] = options
    return found


def plot_files(plot) -> tuple[str | None, dict[str, list[str]]]:
    """(the image a plot shows or None, {data file: the fields it reads}) of one top-level `plots` entry."""
    if isinstance(plot, str):
        return plot, {}
    _, spec = next(iter(plot.items()))
    fields: dict[str, list[str]] = {}
    for axis in ("x", "y"):
        if isinstance(spec.get(axis), dict):
            for path, names in spec[axis].items():
                fields.setdefault(path, []).extend([names] if isinstance(names, str) else names)
    if isinstance(spec.get("x"), str):
        for path in fields:
            fields[path].append(spec["x"])
    return None, fields


def test_dvc_metrics_reads_one_small_file_at_a_path_no_profile_changes():
    assert list(stage_outputs("metrics")) == ["metrics/headline.json"]
    assert "metrics" not in dvc_yaml()  # no top-level metrics either
    outs = stage_outputs("outs")
    # what used to be metrics (timings, per-run finals, per-seed pass@k) are git-tracked plain outputs now
    for path in ("metrics/headline.json", "metrics/timing/train.json", "metrics/train", "eval/passk.json",
                 "metrics/reward_model.json", "metrics/base_models", "metrics/timing/base_models.json"):
        assert outs[PROFILE_OUTPUTS + path] == {"cache": False, "persist": True}, path


def test_every_experiment_groups_final_values_are_one_declared_folder():
    """pipeline.train writes metrics/train/<group>.json for every group of the profile; the groups differ between
    profiles, so dvc.yaml declares the folder once and names no group."""
    outs = stage_outputs("outs")
    assert outs.get(f"{PROFILE_OUTPUTS}metrics/train") == {"cache": False, "persist": True}
    assert not [path for path in outs if re.search(r"metrics/train_\w+\.json", path)], outs


def test_git_tracked_outputs_persist_so_a_failed_stage_keeps_the_committed_ones():
    for path, options in {**stage_outputs("outs"), **stage_outputs("metrics")}.items():
        if options.get("cache") is False and path.startswith("outputs/"):
            assert options.get("persist") is True, path


def test_plots_are_the_reports_images_at_a_path_no_profile_changes():
    """Images only: a browser shows them without network (DVC's interactive plots load their library from a CDN),
    and `dvc plots diff` puts two revisions' side by side."""
    assert dvc_yaml()["plots"] == ["metrics/figures"]
    assert stage_outputs("outs")["metrics/figures"] == {"cache": False, "persist": True}  # git-tracked
    assert "${profile}" not in json.dumps(dvc_yaml()["plots"])


def test_the_dvc_views_hold_six_headline_numbers_and_every_figure(views, tmp_path):
    from cory.report.dvc_views import DVC_HEADLINE, dvc_headline, write_dvc_views

    outputs, _ = views
    summary = json.loads((outputs / "metrics/headline.json").read_text())
    figures = tmp_path / "reports"
    figures.mkdir()
    for name in FIGURES:
        (figures / f"{name}.png").write_bytes(name.encode())
    views_dir = tmp_path / "metrics"
    (views_dir / "figures").mkdir(parents=True)
    (views_dir / "figures" / "gone.png").write_bytes(b"")  # a figure no longer drawn
    write_dvc_views(dvc_headline(summary), sorted(figures.glob("*.png")), views_dir)
    assert sorted(p.stem for p in (views_dir / "figures").iterdir()) == sorted(FIGURES)
    assert (views_dir / "figures/fig3_imdb.png").read_bytes() == b"fig3_imdb"
    flat = dotted_leaves(json.loads((views_dir / "headline.json").read_text()))
    full = dotted_leaves(summary)
    assert flat == {short: full[source] for short, source in DVC_HEADLINE.items()}
    assert set(flat) == {"imdb.ppo.reward", "imdb.ppo.kl", "imdb.cory.reward", "imdb.cory.kl", "math.ppo.pass_at_1",
                         "math.cory.pass_at_1"}
    assert dvc_headline({"imdb": {}}) == {}  # a profile without the numbers: none written


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    outputs = tmp_path_factory.mktemp("views") / "outputs"
    write_fixture(outputs)
    inputs = load_fixture(outputs)
    write_views(inputs, outputs / "metrics", last_n=10)
    return outputs, inputs


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_curves_are_the_mean_over_seeds_of_each_runs_history(views):
    outputs, inputs = views
    rows = read_csv(outputs / "metrics/curves/imdb.csv")
    assert [int(r["iteration"]) for r in rows] == list(range(30))
    for column, run, key in (("ppo/llm1/kl", "ppo", "llm1/kl"), ("cory/llm2/task_reward", "cory", "llm2/task_reward"),
                             ("cory_no_rex/observer/kl", "cory_no_rex", "observer/kl")):
        expected = np.mean(list(inputs.runs["imdb"][run].curves(key).values()), axis=0)
        np.testing.assert_allclose([float(r[column]) for r in rows], expected, rtol=1e-5)
    front = read_csv(outputs / "metrics/curves/pareto_front/CORY-LLM2.csv")
    assert [float(r["eta"]) for r in front] == [0.01, 0.1, 0.3]
    kl = [final_value(y, 10) for y in inputs.sweeps["imdb"].runs["cory"][0.1].curves("llm2/kl").values()]
    assert float(front[1]["kl"]) == pytest.approx(np.mean(kl), rel=1e-5)
    # the math sweep's front and curves, from its own runs (2 seeds)
    front = read_csv(outputs / "metrics/curves/pareto_math_front/PPO.csv")
    assert [float(r["eta"]) for r in front] == [0.01, 0.1, 0.3]
    reward = [final_value(y, 10) for y in inputs.sweeps["math"].runs["ppo"][0.3].curves("llm1/task_reward").values()]
    assert len(reward) == 2 and float(front[2]["task_reward"]) == pytest.approx(np.mean(reward), rel=1e-5)
    rows = read_csv(outputs / "metrics/curves/pareto_math.csv")
    expected = np.mean(list(inputs.sweeps["math"].runs["cory"][0.01].curves("llm2/kl").values()), axis=0)
    np.testing.assert_allclose([float(r["cory_eta0.01/llm2/kl"]) for r in rows], expected, rtol=1e-5)
    passk = read_csv(outputs / "metrics/curves/passk.csv")
    assert [r["k"] for r in passk] == ["1", "2", "4"]
    assert float(passk[2]["cory_llm1"]) == pytest.approx(inputs.passk["cory_llm1"]["mean"]["4"], rel=1e-5)


def test_the_headline_holds_each_groups_final_values_and_the_stage_results(views):
    outputs, inputs = views
    headline = json.loads((outputs / "metrics/headline.json").read_text())
    flat = dotted_leaves(headline)
    assert set(headline) == {"imdb", "math", "passk", "reward_model", "perplexity", "seconds"}
    assert all(isinstance(v, float) for v in flat.values()), flat
    kl = [final_value(y, 10) for y in inputs.runs["imdb"]["ppo"].curves("llm1/kl").values()]
    assert flat["imdb.ppo.llm1.kl"] == pytest.approx(np.mean(kl), rel=1e-5)
    assert {k for k in flat if k.startswith("math.")} == {
        f"math.{run}.{llm}.{m}" for run, llm in (("ppo", "llm1"), ("cory", "llm1"), ("cory", "llm2"))
        for m in ("task_reward", "kl")}
    assert flat["passk.cory_llm1.pass@4"] == pytest.approx(inputs.passk["cory_llm1"]["mean"]["4"])
    assert {k for k in flat if k.startswith("passk.base")} == {"passk.base.pass@1", "passk.base.pass@4"}
    assert flat["reward_model.accuracy"] == 0.91 and flat["perplexity.imdb_small"] == 95.2
    assert flat["seconds.train"] == 300.0
    assert not any("seed" in key for key in flat)  # per-seed detail stays out of the metrics
    assert len(flat) < 60


def test_curve_files_of_runs_gone_from_the_inputs_are_removed(views, tmp_path):
    outputs, inputs = views
    metrics = tmp_path / "metrics"
    (metrics / "curves").mkdir(parents=True)
    (metrics / "curves" / "old_group.csv").write_text("iteration\n0\n")
    write_views(inputs, metrics, last_n=10)
    assert not (metrics / "curves" / "old_group.csv").exists()
    assert (metrics / "curves" / "imdb.csv").is_file() and (metrics / "headline.json").is_file()


# --------------------------------------------------------------------------------------------------------------------
# DVC itself, on the smoke profile
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env() -> dict:
    return clean_env()


@pytest.fixture
def clone(smoke_repo) -> Path:
    """The smoke profile reproduced and committed (conftest.py's one `dvc repro` of the session)."""
    return smoke_repo


@pytest.mark.smoke
def test_dvc_plots_show_renders_every_plot_from_committed_files_offline(clone, env, tmp_path):
    fresh = tmp_path / "fresh"  # a clone of the commit: git-tracked files only, no DVC cache
    sh("git", "clone", "-q", str(clone), str(fresh), cwd=tmp_path, env=env)
    figures = sorted(p.name for p in (clone / "reports/smoke").glob("fig*.png"))
    assert len(figures) >= len(FIGURES)
    # committed, though reports/smoke is git-ignored
    assert sorted(p.name for p in (fresh / "metrics/figures").iterdir()) == figures
    rendered = json.loads(sh("dvc", "plots", "show", "--json", cwd=fresh, env=env))
    assert not rendered.get("errors"), rendered.get("errors")
    data = rendered.get("data", rendered)
    assert sorted(Path(name).name for name in data) == figures
    sh("dvc", "plots", "show", "-o", "html", cwd=fresh, env=env)
    page = (fresh / "html" / "index.html").read_text()
    assert page.count("<img") == len(figures)
    assert not re.search(r"<script[^>]+src=", page)  # nothing to fetch: the page shows the same offline


@pytest.mark.smoke
def test_dvc_metrics_show_prints_the_headline(clone, env):
    shown = json.loads(sh("dvc", "metrics", "show", "--json", cwd=clone, env=env))
    files = shown[""]["data"]
    assert list(files) == ["metrics/headline.json"]
    flat = dotted_leaves(files["metrics/headline.json"]["data"])
    assert set(flat) == {"imdb.ppo.reward", "imdb.ppo.kl", "imdb.cory.reward", "imdb.cory.kl", "math.ppo.pass_at_1",
                         "math.cory.pass_at_1"}, flat


@pytest.mark.smoke
def test_dvc_exp_run_sets_a_param_and_exp_show_compares_it_with_the_workspace(clone, env, tmp_path):
    """The smoke_repo's last commit holds the smoke profile's params.yaml, dvc.lock and metrics/ (as the README tells a
    user to commit a profile's run before experimenting): `dvc exp show --only-changed` then shows the changed params
    and the headline metrics, and nothing else of the profile."""
    repo = tmp_path / "repo"
    shutil.copytree(clone, repo, symlinks=True)
    # DVC writes the params in YAML 1.2: 2e-5 becomes `2e-05`, a number that YAML 1.1 would read as a string.
    # report.tolerance is not written in params.yaml (its default applies): DVC adds such a leaf with "+KEY=VALUE".
    out = sh("dvc", "exp", "run", "-S", "report.last_n=2", "-S", "+report.tolerance=2e-5", "-n", "last2", cwd=repo,
             env=env)
    # the train stage reads report.last_n too (each summary's final values): it keeps every run, retraining none
    assert "Running stage 'report'" in out and "Running stage 'params'" in out
    assert re.search(r"\[train\] (\d+) runs: \1 finished with the same fingerprint \(kept\), 0 to resume, 0 to train", out)
    assert json.loads((repo / "outputs/smoke/runs/imdb/ppo/seed0/summary.json").read_text())["last_n"] == 2
    assert "tolerance: 2e-05" in (repo / "params.yaml").read_text()
    table = list(csv.reader(sh("dvc", "exp", "show", "--csv", "--only-changed", cwd=repo, env=env).splitlines()))
    header, rows = table[0], table[1:]
    # Experiment, rev, typ, Created, then what differs: the two params, the headline metrics (3 iterations: the
    # last 2 differ from all 10, so every final changes but pass@k, which the change leaves alone) and the hash of
    # the deps that changed (outputs/smoke/runs: the summaries' final values, which the report reads)
    changed = set(header) - {"Experiment", "rev", "typ", "Created", "parent", "State", "Executor"}
    assert {"report.last_n", "report.tolerance", "imdb.ppo.reward", "imdb.cory.kl"} <= changed, header
    assert {column for column in changed if not column.startswith("outputs/")} <= {
        "report.last_n", "report.tolerance", "imdb.ppo.reward", "imdb.ppo.kl", "imdb.cory.reward", "imdb.cory.kl",
        "math.ppo.pass_at_1", "math.cory.pass_at_1"}, header
    assert len(header) <= 14, header  # a table a terminal shows
    assert any("last2" in row for row in rows)
    full = next(csv.reader(sh("dvc", "exp", "show", "--csv", cwd=repo, env=env).splitlines()))
    assert not any(column.startswith("report.deviations") for column in full)
    # every param leaf (the `params` stage reads them all), metric and dep (deps are columns too)
    assert len(full) < 400


@pytest.mark.smoke
def test_a_key_no_stage_reads_fails_dvc_repro_and_reruns_nothing_else(clone, env, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(clone, repo, symlinks=True)
    params = repo / "params.yaml"
    params.write_text(params.read_text() + "foo: 1\n")
    result = subprocess.run(["dvc", "repro"], cwd=repo, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "foo" in result.stdout + result.stderr
    assert re.findall(r"Running stage '(\w+)'", result.stdout) == ["params"]
    params.write_text(params.read_text().replace("foo: 1\n", ""))
    out = sh("dvc", "repro", cwd=repo, env=env)
    assert re.findall(r"Running stage '(\w+)'", out) == []  # params.yaml as the lock recorded it
    assert json.loads(sh("dvc", "status", "--json", cwd=repo, env=env)) == {}
