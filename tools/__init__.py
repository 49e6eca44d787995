"""Tools, run from the project root: `python -m tools.build_standins` (the paper's models as small local stand-ins),
`python -m tools.variants` (side-by-side variant runs), `bash tools/diagnostics.sh`, `python -m tools.mlflow_screenshot`."""
