"""CORY: sequential cooperative multi-agent RL fine-tuning of language models (Ma et al., NeurIPS 2024)."""
