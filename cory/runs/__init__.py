"""One RL run end to end: experiment groups expanded into runs x seeds (config, torch-free), and training one of
them into its run folder (run)."""
