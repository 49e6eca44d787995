"""Tools run from the project root: `python -m scripts.bench_rl` (device_repro.sh is a shell script)."""
