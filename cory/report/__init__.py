"""The paper's claims and figures: the run files read back (results), each claim's rule and verdict (claims), the
figures and REPORT.md, DVC's metrics and plots (dvc_views) and the MLflow parent run of a `dvc repro`."""
