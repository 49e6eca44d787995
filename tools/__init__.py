"""Tools, run from the project root: `python -m tools.build_standins` (the paper's models as small local stand-ins),
`python -m tools.readme_results` (README's results table), `python -m tools.docs_tables` (the docs' measurement
tables), `python -m tools.score_runs` (the report's claims on finished runs), `python -m tools.compare_runs` (which
runs of two repros repeat each other)."""
