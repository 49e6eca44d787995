"""One-off and then-against-now measurements (lab/README.md): `python -m lab.bench.<name>`,
`bash lab/bench/<name>.sh`."""
