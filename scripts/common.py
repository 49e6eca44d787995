"""Helpers shared by the scripts (kept out of cory/ and pipeline/, which are DVC dependencies of the stages)."""

from __future__ import annotations

from typing import Any

import yaml


QUERY_WORDS = "the movie film was a great bad plot actor story not very good I this one of it and so".split()
"""Words the benchmarks draw IMDB-like queries from (their content does not change an iteration's cost)."""


def set_dotted(tree: dict[str, Any], item: str) -> dict[str, Any]:
    """Put one dotted KEY=VALUE setting (the value read as YAML, so it may hold commas: [4, 8]) into `tree`."""
    key, _, value = item.partition("=")
    node = tree
    *parents, leaf = key.strip().split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = yaml.safe_load(value)
    return tree


def dotted_overrides(spec: str) -> dict[str, Any]:
    """'ppo.mixed_precision=false,ppo.forward_batch_size=64' -> {'ppo': {'mixed_precision': False, ...}}: comma-separated
    dotted KEY=VALUE settings (values read as YAML) as the nested dict that cory.config.merge takes."""
    tree: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        set_dotted(tree, item)
    return tree
