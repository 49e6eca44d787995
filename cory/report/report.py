"""The reproduction report, reports/<profile>/: the paper's figures, REPORT.md, samples.md, METRICS.md, claims.json.

`write_report` loads every run (cory.report.results), tests each claim of the paper (cory.report.claims), draws the
figures (cory.report.figures) and writes the markdown (cory.report.markdown). Every number in the report is computed
from the run files; every verdict comes from a written rule (cory.report.claims, docs/claims.md), never from
hand-written text. Every file is written atomically (cory.files.atomic_write): a stage killed midway leaves each file
whole, old or new.
"""

from __future__ import annotations

import json
from pathlib import Path

from cory.files import atomic_write, read_json
from cory.report.claims import Claim, build_claims
from cory.report.claims_roles import role_swap_claims, role_swap_figures
from cory.report import plots
from cory.report.config import ReportConfig
from cory.report.figures import draw_figures
from cory.report.markdown import glossary_markdown, report_markdown, samples_markdown, summary_json
from cory.report.results import Inputs, load_inputs
from cory.runs.config import ExperimentConfig


def read_rerun(cfg: ReportConfig, profile: str, root: Path) -> tuple[str, dict | None] | None:
    """(report.rerun as shown, its claims.json or None if missing); None where report.rerun is null."""
    if cfg.rerun is None:
        return None
    where = cfg.rerun.format(profile=profile)
    path = root / where
    return where, read_json(path) if path.is_file() else None


def write_report(
    outputs: Path, reports: Path, cfg: ReportConfig, experiments: dict[str, ExperimentConfig],
    seeds: list[int] | None, profile: str, root: Path | None = None,
) -> tuple[Inputs, list[Claim]]:
    """Read outputs/<profile>/ (the groups and seeds that `experiments` and `seeds` of params name,
    cory.report.results.load_inputs, and the IMDB groups of report.imdb_groups) and write reports/<profile>/: the
    figures, REPORT.md, samples.md, METRICS.md and claims.json (each claim's verdict, mean quantities and effects, for
    `dvc metrics`/diffs and for comparing reruns). `root` is the project root report.rerun is relative to (default:
    the folder above reports/). Returns the inputs it read and the claims, for the stage's other consumers (DVC's
    views, the MLflow parent run), which then read nothing again."""
    inputs = load_inputs(outputs, experiments, seeds, cfg.imdb_groups, cfg.mechanism)
    claims = build_claims(inputs, cfg)  # every quantity is computed (and every missing column found) before drawing
    claims += role_swap_claims(outputs, inputs, cfg)
    reports.mkdir(parents=True, exist_ok=True)
    figures = draw_figures(inputs, cfg) | role_swap_figures(outputs, inputs, cfg)
    for name, (figure, _) in figures.items():
        plots.save(figure, reports / f"{name}.png")
    captions = {name: caption for name, (_, caption) in figures.items()}
    rerun = read_rerun(cfg, profile, reports.parent.parent if root is None else root)
    atomic_write(reports / "REPORT.md", report_markdown(inputs, claims, cfg, profile, captions, rerun))
    atomic_write(reports / "samples.md", samples_markdown(inputs, cfg))
    atomic_write(reports / "METRICS.md", glossary_markdown())
    atomic_write(reports / "claims.json", json.dumps(summary_json(claims), indent=2) + "\n")
    return inputs, claims
