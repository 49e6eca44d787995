"""DVC stage `report`: the paper's figures, REPORT.md (each claim with its numbers and verdict), samples.md, METRICS.md.

    python -m pipeline.report

Reads params `report` (cory.report.config.ReportConfig; its `deviations` from profiles/deviations.yaml), `profile`,
`seeds` and `experiments` (which group sweeps each task's KL coefficient, and a group's own seeds), and every run
of outputs/<profile>/runs/, eval/passk.json and metrics/ (and profiles/notes/<profile>.md, the maintainers' notes on
the run, if it exists); writes reports/<profile>/ (see cory.report.write_report) and DVC's views of the results, outputs/<profile>/metrics/headline.json and
metrics/curves/ (cory.report.dvc_views). A missing run folder, seed folder or input file stops the stage with one line naming
it, before any figure is drawn.
First it logs to MLflow every run that DVC restored from its cache instead of running it (cory.tracking.sync_runs):
the report always runs after train, so MLflow then lists every run the report is made of. Last it logs the parent
run of this `dvc repro` (cory.tracking.log_pipeline_run): the headline numbers, the verdicts and reports/<profile>/,
with every run the report is made of nested under it.
"""

from __future__ import annotations

from cory.schema import from_dict
from cory.runs.config import ExperimentConfig
from cory.report.config import ReportConfig
from cory.report.report import write_report
from cory.report.results import load_inputs
from cory.report.pipeline_run import log_pipeline_run
from cory.tracking.restore import sync_runs
from cory.report.dvc_views import write_views
from pipeline.common import run_stage, stage_timer
from pipeline.params import load_params, section, seeds
from pipeline.paths import ROOT, out_dir, profile

__all__ = ["main"]


def main() -> None:
    params = load_params()
    cfg = section(params, "report", ReportConfig)
    name = profile(params)
    with stage_timer(params, "report"):
        # which groups sweep a task's KL coefficient (Fig. 2c), and the seeds of groups that run fewer
        experiments = {group: from_dict(ExperimentConfig, spec, f"experiments.{group}")
                       for group, spec in (params.get("experiments") or {}).items()}
        logged = sync_runs(out_dir(params, "runs"), name, {group: exp.task for group, exp in experiments.items()})
        if logged:
            print(f"report: {len(logged)} run(s) restored by DVC now listed in MLflow")
        notes = ROOT / "profiles" / "notes" / f"{name}.md"  # maintainers' words on this run, if any
        claims = write_report(out_dir(params), ROOT / "reports" / name, cfg, experiments, seeds(params), name,
                              notes.read_text() if notes.is_file() else None)
        # DVC's views (cory.report.dvc_views): headline.json (`dvc metrics`) and the curve tables (`dvc plots`), git-tracked
        write_views(load_inputs(out_dir(params), experiments, seeds(params)), out_dir(params, "metrics"), cfg.last_n)
        log_pipeline_run(name, out_dir(params, "runs"), out_dir(params, "eval", "passk.json"), ROOT / "reports" / name)
    for claim in claims:
        print(f"report: {claim.verdict:>14}  {claim.paper}")
    print(f"report: wrote reports/{name}/REPORT.md")


if __name__ == "__main__":
    run_stage(main)
