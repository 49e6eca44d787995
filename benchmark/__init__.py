"""Benchmarks, run from the project root: `python -m benchmark.rl` (an RL iteration's throughput), `decode`,
`evaluate`, `base_models`, `vocab_passes`, `paper` (the paper profile's runs: reports/<profile>/scale.json),
`pretrain`, `compile_count`, `token_ratio`, `usage_by_stage`; and the shell drivers speed.sh, then_now.sh,
paper_then_now.sh and gpus.sh. What they measured is in docs/speed.md."""
