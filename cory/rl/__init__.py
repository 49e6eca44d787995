"""The method (paper §3, Algorithm 1): PPO, the two CORY agents, their roles, rollouts and the training step.

Imports cory.schema and cory.hf only; what the RL runs on (data, rewards, base models) is cory.tasks'.
"""
