"""DVC stage `report`: the paper's figures, REPORT.md (each claim with its numbers and verdict), samples.md, METRICS.md.

    python -m pipeline.report

Reads params `report` (cory.report.config.ReportConfig; its `deviations` from profiles/deviations.yaml), `profile`,
`seeds` and `experiments` (which group sweeps each task's KL coefficient, and a group's own seeds), and every run of
outputs/<profile>/runs/, eval/passk.json and metrics/, once; writes reports/<profile>/
(cory.report.report.write_report: generated text only; prose about a run goes into its commit's body), the profile's
final values and curves, outputs/<profile>/metrics/headline.json and metrics/curves/, and what DVC compares between
revisions, metrics/headline.json and metrics/figures/ at the project root whatever the profile
(cory.report.dvc_views), each file atomically. A missing run folder, seed folder or input file stops the stage with
one line naming it, before any figure is drawn.
First it logs to MLflow every run that DVC restored from its cache instead of running it (cory.tracking.restore):
the report always runs after train, so MLflow then lists every run the report is made of. Last it logs the parent
run of this `dvc repro` (cory.report.pipeline_run): the final values of headline.json's definition, the verdicts and
reports/<profile>/, with every run the report is made of nested under it.
"""

from __future__ import annotations

from cory.report.dvc_views import dvc_headline, headline, run_finals, write_dvc_views, write_views
from cory.report.pipeline_run import log_pipeline_run
from cory.report.report import write_report
from cory.schema import dotted_leaves
from cory.tracking.restore import sync_runs
from pipeline.common import run_stage, stage_timer
from pipeline.params import load_params
from pipeline.paths import ROOT, out_dir
from pipeline.single_writer import stage_lock

__all__ = ["main"]


def changed() -> dict[str, object]:
    """The settings this run changed from its profile (an experiment's -S values), for the MLflow parent run's name;
    none where the profile cannot be rendered (params that are no profile's, e.g. a side experiment's $CORY_PARAMS)."""
    from cory.schema import ConfigError
    from pipeline.params import params_path, read_yaml
    from pipeline.profile import changed_settings

    try:
        return changed_settings(read_yaml(params_path()))
    except (ConfigError, OSError):
        return {}


def main() -> None:
    params = load_params()
    cfg, name = params.report, params.profile
    with stage_lock(params, "report"), stage_timer(params, "report"):  # one writer (pipeline.single_writer)
        experiments = params.experiments  # which groups sweep a task's KL coefficient (Fig. 2c), a group's own seeds
        logged = sync_runs(out_dir(params, "runs"), name, {group: exp.task for group, exp in experiments.items()})
        if logged:
            print(f"report: {len(logged)} run(s) restored by DVC now listed in MLflow")
        inputs, claims = write_report(out_dir(params), ROOT / "reports" / name, cfg, experiments, params.seeds, name,
                                      root=ROOT)
        # the profile's final values and curves, and DVC's views (`dvc metrics`, `dvc plots`, `dvc exp show`) at
        # paths no profile changes, so that two revisions line up (cory.report.dvc_views); all git-tracked. The
        # MLflow parent run shows the same final values
        write_views(inputs, out_dir(params, "metrics"), cfg.last_n)
        summary = dvc_headline(headline(inputs, cfg.last_n))
        write_dvc_views(summary, sorted((ROOT / "reports" / name).glob("fig*.png")), ROOT / "metrics")
        log_pipeline_run(name, run_finals(inputs, cfg.last_n), inputs.passk, {c.key: c.verdict for c in claims},
                         out_dir(params, "runs"), ROOT / "reports" / name, changed(), dotted_leaves(summary))
    for claim in claims:
        print(f"report: {claim.verdict:>14}  {claim.paper}")
    print(f"report: wrote reports/{name}/REPORT.md")


if __name__ == "__main__":
    run_stage(main)
