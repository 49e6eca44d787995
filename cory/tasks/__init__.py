"""What the RL runs on: the IMDB and math data, the rewards, the tokenizers, the base models and the reward
classifier trained here, and pass@k evaluation. May use cory.rl's sampler."""
