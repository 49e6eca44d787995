"""DVC stage `report`: the paper's figures, REPORT.md (each claim with its numbers and verdict), samples.md, METRICS.md.

    python -m pipeline.report

Reads params `report` (cory.report.ReportConfig), `profile` and `seeds`, and every run of outputs/<profile>/runs/,
eval/passk.json and metrics/; writes reports/<profile>/ (see cory.report.write_report). A missing run folder, seed
folder or input file stops the stage with one line naming it, before any figure is drawn.
First it logs to MLflow every run that DVC restored from its cache instead of running it (cory.tracking.sync_runs):
the report always runs after train, so MLflow then lists every run the report is made of.
"""

from __future__ import annotations

from cory.report import ReportConfig, write_report
from cory.tracking import sync_runs
from pipeline.common import ROOT, load_params, out_dir, profile, run_stage, section, seeds, stage_timer

__all__ = ["ReportConfig", "main"]  # ReportConfig is the `report` section pipeline.params validates


def main() -> None:
    params = load_params()
    cfg = section(params, "report", ReportConfig)
    name = profile(params)
    with stage_timer(params, "report"):
        logged = sync_runs(out_dir(params, "runs"), name)
        if logged:
            print(f"report: {len(logged)} run(s) restored by DVC now listed in MLflow")
        claims = write_report(out_dir(params), ROOT / "reports" / name, cfg, seeds(params), name)
    for claim in claims:
        print(f"report: {claim.verdict:>14}  {claim.paper}")
    print(f"report: wrote reports/{name}/REPORT.md")


if __name__ == "__main__":
    run_stage(main)
