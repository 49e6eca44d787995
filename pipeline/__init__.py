"""Thin DVC stage entry points: each reads its params and inputs, calls `cory`, writes the outputs dvc.yaml declares."""
