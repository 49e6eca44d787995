"""Benchmarks, run from the project root: `python -m benchmark.rl` (an RL iteration's throughput, phase by phase:
`phases`), `trl` (trl 0.11.4's PPO beside ours, in the environment trl_env.sh makes), `grpo` (our GRPO beside trl's
GRPOTrainer), `launches`, `decode`, `evaluate`, `paper` (the paper profile's runs: reports/<profile>/scale.json),
`pretrain`, `compile_count`. What each speed setting changes and how it is measured: docs/speed.md."""
