"""The MLflow parent run of one `dvc repro`, logged by the report stage: the headline numbers as metrics and as its
description, each claim's verdict, reports/<profile>/ as artifacts, and every run the report is made of nested under
it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cory.report.markdown import table
from cory.tracking.restore import run_folders
from cory.tracking.runs import start_run
from cory.tracking.tags import PIPELINE_KEY, git_commit, pipeline_run_id


HEADLINE = {"task_reward": "task reward", "kl": "KL"}
"""The per-model final values of each training run that the parent run shows, with their column titles."""


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def headline_markdown(metrics: dict[str, float], passk: dict[str, Any], verdicts: dict[str, str]) -> str:
    """The parent run's description (the UI's run page shows it): the runs' final values (cory.report.dvc_views.
    run_finals), Pass@k (eval/passk.json's mean over seeds) and the claims' verdicts as tables."""
    runs = sorted({name.removeprefix("headline/").rsplit(".", 2)[0] for name in metrics})
    columns = [(llm, metric) for llm in ("llm1", "llm2") for metric in HEADLINE]
    lines = ["Final values (mean over the last iterations, then over seeds). The runs this pipeline is made of are "
             "nested under this run: expand it (+) in the run list.", ""]
    # "<group>.<run>" back to "<group>/<run>": only the first "." (a run's name may hold one: pareto/cory_eta0.01)
    lines += table(["run", *(f"{llm.upper()} {HEADLINE[metric]}" for llm, metric in columns)],
                   [[run.replace(".", "/", 1), *(_number(metrics.get(f"headline/{run}.{llm}.{metric}"))
                                                 for llm, metric in columns)] for run in runs])
    ks = sorted({k for result in passk.values() for k in result["mean"]}, key=int)
    if passk:
        rows = [[model, *(_number(result["mean"].get(k)) for k in ks)] for model, result in passk.items()]
        lines += ["", *table(["model", *(f"pass@{k}" for k in ks)], rows)]
    if verdicts:
        lines += ["", *table(["claim", "verdict"], [[key, v] for key, v in verdicts.items()])]
    return "\n".join(lines) + "\n"


def _all_runs(client, experiment_id: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        runs += page
        token = page.token
        if not token:
            return runs


def _nest(client, parent_id: str, profile: str, runs_dir: Path) -> list[str]:
    """Make the runs the report is made of children of `parent_id` (returns their ids): the current run of every
    finished run folder, and the newest finished run of every other stage (by run name, e.g. base_model@math)."""
    experiment_id = client.get_run(parent_id).info.experiment_id
    current = [run for run in _all_runs(client, experiment_id)
               if run.data.tags.get("superseded") != "true" and run.info.run_id != parent_id]
    keys = {f"{profile}/{folder.relative_to(runs_dir).as_posix()}" for folder in run_folders(runs_dir)}
    newest: dict[str, Any] = {}
    for run in current:
        stage = run.data.tags.get("dvc_stage")
        if stage in ("train", "report") or run.info.status != "FINISHED":
            continue
        if run.info.run_name not in newest or run.info.start_time > newest[run.info.run_name].info.start_time:
            newest[run.info.run_name] = run
    children = [run.info.run_id for run in current if run.data.tags.get("run_key") in keys]
    children += [run.info.run_id for run in newest.values()]
    for child in children:
        client.set_tag(child, "mlflow.parentRunId", parent_id)
    return children


NAME_LENGTH = 40
"""Characters of a parent run's name the runs table shows untruncated at its default column width, about."""


def run_name(profile: str, commit: str, changed: dict[str, Any]) -> str:
    """"<profile> <commit> <setting>=<value> ...": a run of an experiment (`dvc exp run -S ...`) is told from the
    baseline it varies by the settings it changed, each by its last name (learning_rate=2e-05), as many as fit
    NAME_LENGTH and "+<n>" for the rest (the tag `changed` has them all, by their dotted paths). A commit is shortened
    to 7 hex digits, as git shows it."""
    name = f"{profile} {commit[:7] if re.fullmatch(r'[0-9a-f]{40}', commit) else commit}"
    settings = [f"{key.rsplit('.', 1)[-1]}={value}" for key, value in changed.items()]
    for i, setting in enumerate(settings):
        if i and len(f"{name} {setting}") > NAME_LENGTH:
            return f"{name} +{len(settings) - i}"
        name = f"{name} {setting}"
    return name


VIEW_KEY = "headline"
"""The runs table's view the report stage shares (the experiment tag mlflow.sharedViewState.<VIEW_KEY>), opened by
`?viewStateShareKey=<VIEW_KEY>` in the runs page's address (`view_url`)."""
RUN_COLUMNS = ("llm1/task_reward", "llm1/kl")
"""Each training run's own metrics beside the headline ones in that view (the last iteration's values)."""


def view_state(headline: dict[str, float]) -> dict:
    """The MLflow UI's runs-table state of VIEW_KEY: the headline numbers (the parent run's) and RUN_COLUMNS as its
    columns, wide enough for their names and the runs' names "<group>/<run>/seed<k>". MLflow's runs table shows no
    metric until one is picked under Columns; a shared view is the one way to preselect them (the UI reads the tag's
    JSON as its `selectedColumns`, `columnWidths`, ...; not which runs are expanded)."""
    columns = [f"metrics.`{name}`" for name in (*headline, *RUN_COLUMNS)]
    order = ["attributes.`Run Name`", "attributes.`Created`", "attributes.`Duration`", *columns,
             "attributes.`Source`"]  # the UI applies the widths along with an order only
    return {"selectedColumns": ["attributes.`Source`", *columns], "columnOrder": order,
            "columnWidths": {"attributes.`Run Name`": 300, **{column: 130 for column in columns}}}


def view_url(experiment_id: str, base: str = "http://127.0.0.1:5000") -> str:
    """The runs table of `experiment_id` in the shared view (and in the "Model training" pages, not MLflow 3's
    GenAI ones)."""
    return f"{base}/#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW_KEY}&workflowType=machine_learning"


def _share_view(client, parent_id: str, headline: dict[str, float]) -> str:
    experiment_id = client.get_run(parent_id).info.experiment_id
    client.set_experiment_tag(experiment_id, f"mlflow.sharedViewState.{VIEW_KEY}",
                              json.dumps(view_state(headline)))
    return view_url(experiment_id)


def log_pipeline_run(profile: str, metrics: dict[str, float], passk: dict[str, Any], verdicts: dict[str, str],
                     runs_dir: Path, reports: Path, changed: dict[str, Any] | None = None,
                     headline: dict[str, float] | None = None) -> str | None:
    """The parent run of one `dvc repro`, logged by the report stage once reports/<profile>/ is written; returns its
    id (None if MLflow is unavailable). Named "<profile> <pipeline_run> <changed settings>" (run_name) and keyed
    PIPELINE_KEY (the previous pipeline's parent is superseded), it holds the runs' final values (`metrics`: cory.report.dvc_views.run_finals)
    as metrics at step 0 and as its description, Pass@k of each model (`passk`: eval/passk.json, mean over seeds)
    as "headline/pass_at_<k>.<model>", each claim's verdict as a tag `claim.<key>`, reports/<profile>/ as artifacts
    under report/, and, nested under it by the tag mlflow.parentRunId, every run the report is made of (_nest).
    `headline` (metrics/headline.json's numbers by their dotted keys) is logged too, and shared as the runs table's
    columns (view_state); the stage prints the view's address."""
    tags = {"mlflow.note.content": headline_markdown(metrics, passk, verdicts),
            **{f"claim.{key}": verdict for key, verdict in verdicts.items()},
            **({"changed": ", ".join(f"{k}={v}" for k, v in changed.items())[:5000]} if changed else {})}
    name = run_name(profile, pipeline_run_id(git_commit()), changed or {})
    with start_run("report", {}, tags, name, profile=profile, outputs=reports, key=PIPELINE_KEY,
                   source="pipeline.report") as parent:
        parent.log_metrics({**metrics, **{f"headline/pass_at_{k}.{model}": value for model, result in passk.items()
                                          for k, value in result["mean"].items()}, **(headline or {})}, step=0)
        if reports.is_dir():
            parent.log_artifacts(reports, "report")
        parent._call("nest runs", lambda: _nest(parent._client, parent.run_id, profile, runs_dir))
        url = parent._call("share the runs view", lambda: _share_view(parent._client, parent.run_id, headline or {}))
        if url:
            print(f"report: MLflow's runs with the headline numbers as columns: {url} (after `mlflow ui`)")
    return parent.run_id if parent.active else None
