"""The measurement lab: what measures once, operates a particular machine or remembers (lab/README.md). Run from the
project root (`python -m lab.bench.token_ratio`, `bash lab/offline-gpu/device_repro.sh ...`); it imports only the
library (cory) and the public params API (load_params, out_dir, run_stage), and nothing outside it names it."""
