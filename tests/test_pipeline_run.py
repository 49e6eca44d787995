"""The MLflow parent run of a `dvc repro` (cory.report.pipeline_run): the runs' final values as headline.json
defines them, Pass@k and the verdicts as metrics, tags and its description, every run of the report nested under it."""

import json

from mlflow.tracking import MlflowClient

from cory.report.pipeline_run import headline_markdown, log_pipeline_run
from cory.tracking.runs import start_run
from store_fixtures import CONFIG, runs_of, warnings_in, write_run_folder
from store_fixtures import never_the_project_store, store  # noqa: F401 (the store fixtures, for these tests too)


def run_of(name: str, seeds: dict[int, dict[str, list[float]]]):
    """A Run of the report's inputs: each seed's history as columns."""
    import pandas as pd

    from cory.report.results import Run

    return Run(name, {seed: pd.DataFrame(columns) for seed, columns in seeds.items()}, {}, [], {})


def test_the_parent_runs_finals_are_headline_jsons_means_over_seeds():
    """The MLflow parent run shows each run's final values as headline.json defines them (report.last_n), sweeps
    included, under names that keep a run's own dot (pareto's cory_eta0.01)."""
    from cory.report.dvc_views import run_finals
    from cory.report.results import Inputs, Sweep

    ppo = run_of("imdb/ppo", {0: {"llm1/task_reward": [9.0, 1.0], "llm1/kl": [9.0, 4.0], "llm1/entropy": [9.0, 9.0]},
                              1: {"llm1/task_reward": [9.0, 2.0], "llm1/kl": [9.0, 6.0]}})
    cory = run_of("imdb/cory", {0: {"llm1/task_reward": [0.5], "llm1/kl": [1.0], "llm2/task_reward": [0.25],
                                    "llm2/kl": [2.0]}})
    swept = run_of("pareto/cory_eta0.01", {0: {"llm1/task_reward": [3.0, 1.0], "llm1/kl": [3.0, 4.0]}})
    inputs = Inputs({"imdb": {"ppo": ppo, "cory": cory}}, {"imdb": Sweep("pareto", {"ppo": {}, "cory": {0.01: swept}})},
                    {}, {}, {}, {})
    assert run_finals(inputs, last_n=1) == {
        "headline/imdb.cory.llm1.kl": 1.0, "headline/imdb.cory.llm1.task_reward": 0.5,
        "headline/imdb.cory.llm2.kl": 2.0, "headline/imdb.cory.llm2.task_reward": 0.25,
        "headline/imdb.ppo.llm1.kl": 5.0, "headline/imdb.ppo.llm1.task_reward": 1.5,
        "headline/pareto.cory_eta0.01.llm1.kl": 4.0, "headline/pareto.cory_eta0.01.llm1.task_reward": 1.0,
    }
    assert run_finals(inputs, last_n=2)["headline/imdb.ppo.llm1.kl"] == 7.0


def test_headline_markdown_tables():
    metrics = {"headline/imdb.cory.llm1.kl": 1.0, "headline/imdb.cory.llm1.task_reward": 0.5,
               "headline/imdb.cory.llm2.kl": 2.0, "headline/imdb.cory.llm2.task_reward": 0.25,
               "headline/imdb.ppo.llm1.kl": 5.0, "headline/imdb.ppo.llm1.task_reward": 1.5}
    passk = {"base": {"mean": {"16": 0.5, "1": 0.25}}, "ppo": {"mean": {"1": 0.375, "16": 0.625}}}
    assert headline_markdown(metrics, passk, {"imdb_kl_ratio": "held"}).splitlines() == [
        "Final values (mean over the last iterations, then over seeds). The runs this pipeline is made of are nested "
        "under this run: expand it (+) in the run list.",
        "",
        "| run | LLM1 task reward | LLM1 KL | LLM2 task reward | LLM2 KL |",
        "|---|---|---|---|---|",
        "| imdb/cory | 0.5 | 1 | 0.25 | 2 |",
        "| imdb/ppo | 1.5 | 5 |   |   |",  # an empty cell, as in REPORT.md's tables
        "",
        "| model | pass@1 | pass@16 |",
        "|---|---|---|",
        "| base | 0.25 | 0.5 |",
        "| ppo | 0.375 | 0.625 |",
        "",
        "| claim | verdict |",
        "|---|---|",
        "| imdb_kl_ratio | held |",
    ]


def test_headline_markdown_keeps_the_dot_in_a_runs_name():
    """pareto's runs are named cory_eta0.01: the description said "pareto/cory_eta0/01" (seen in the UI)."""
    metrics = {"headline/pareto.cory_eta0.01.llm1.kl": 4.0, "headline/pareto.cory_eta0.01.llm1.task_reward": 1.0}
    assert "| pareto/cory_eta0.01 | 1 | 4 |   |   |" in headline_markdown(metrics, {}, {}).splitlines()


def test_the_report_stage_logs_a_parent_run_with_the_runs_of_the_pipeline_nested(store, monkeypatch, tmp_path):
    monkeypatch.setenv("CORY_PIPELINE_RUN", "repro-7")
    runs_dir, reports = tmp_path / "runs", tmp_path / "reports"
    for key in ("imdb/ppo/seed0", "imdb/ppo/seed1"):
        write_run_folder(runs_dir, key, CONFIG)
    reports.mkdir()
    (reports / "REPORT.md").write_text("# report\n")
    (reports / "claims.json").write_text(json.dumps({"imdb_kl_ratio": {"verdict": "held", "means": {}}}))
    finals = {"headline/imdb.ppo.llm1.task_reward": 1.5, "headline/imdb.ppo.llm1.kl": 5.0}  # run_finals' of the runs
    passk, verdicts = {"ppo": {"mean": {"1": 0.5, "2": 0.75}}}, {"imdb_kl_ratio": "held"}

    def run(stage, name=None, key=None):
        with start_run(stage, CONFIG, run_name=name, profile="parent", outputs=tmp_path, key=key) as tracker:
            pass
        return tracker.run_id

    superseded = run("train", "imdb/ppo/seed0", "imdb/ppo/seed0")
    trained = [run("train", "imdb/ppo/seed0", "imdb/ppo/seed0"), run("train", "imdb/ppo/seed1", "imdb/ppo/seed1")]
    removed = run("train", "imdb/old/seed0", "imdb/old/seed0")  # its folder is gone: not a run of this report
    old_eval, new_eval, model = run("evaluate"), run("evaluate"), run("base_model@math")
    previous = log_pipeline_run("parent", finals, passk, verdicts, runs_dir, reports)
    headline = {"imdb.ppo.reward": 1.5, "math.ppo.pass_at_1": 0.5}  # metrics/headline.json's, dotted
    parent_id = log_pipeline_run("parent", finals, passk, verdicts, runs_dir, reports, headline=headline)

    client = MlflowClient(tracking_uri=store)
    parent = client.get_run(parent_id)
    assert parent.info.run_name == "parent repro-7" and parent.info.status == "FINISHED"
    assert parent.data.tags["run_key"] == "parent/pipeline" and parent.data.tags["pipeline_run"] == "repro-7"
    assert client.get_run(previous).data.tags["superseded_by"] == parent_id
    assert parent.data.metrics == {"headline/imdb.ppo.llm1.task_reward": 1.5, "headline/imdb.ppo.llm1.kl": 5.0,
                                   "headline/pass_at_1.ppo": 0.5, "headline/pass_at_2.ppo": 0.75, **headline}
    # the runs table's shared view: the headline numbers and each training run's llm1 metrics as columns
    view = json.loads(client.get_experiment(parent.info.experiment_id).tags["mlflow.sharedViewState.headline"])
    assert view["selectedColumns"] == ["attributes.`Source`", "metrics.`imdb.ppo.reward`",
                                       "metrics.`math.ppo.pass_at_1`", "metrics.`llm1/task_reward`", "metrics.`llm1/kl`"]
    assert view["columnWidths"]["metrics.`imdb.ppo.reward`"] == 130 and view["columnOrder"][0] == "attributes.`Run Name`"
    assert parent.data.tags["claim.imdb_kl_ratio"] == "held"
    assert "| imdb/ppo | 1.5 | 5 |   |   |" in parent.data.tags["mlflow.note.content"]
    assert sorted(a.path for a in client.list_artifacts(parent_id, "report")) == ["report/REPORT.md",
                                                                                  "report/claims.json"]
    nested = {r.info.run_id for r in runs_of(store, "parent") if r.data.tags.get("mlflow.parentRunId") == parent_id}
    assert nested == {*trained, new_eval, model}
    assert not {superseded, removed, old_eval} & nested


def test_a_parent_run_with_an_unusable_store_warns_once(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://nowhere")
    write_run_folder(tmp_path / "runs", "imdb/ppo/seed0", CONFIG)
    assert log_pipeline_run("test", {}, {}, {}, tmp_path / "runs", tmp_path / "reports") is None
    (warning,) = warnings_in(capsys)
    assert warning.startswith("WARNING: MLflow unavailable")
