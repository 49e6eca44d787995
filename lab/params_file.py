"""The params file the stages read, as written: params.yaml at the project root, or the file $CORY_PARAMS names (the
stages' rule). The lab's studies write params files of their own from it; the validated tree (load_params) would not
do, since it holds the settings filled from elsewhere, which a params file may not write."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from cory.schema import dotted_tree
from pipeline.params import load_params

ROOT = Path(__file__).resolve().parents[1]


def written_params() -> dict[str, Any]:
    """The params file's settings as written, once the whole file is checked valid (load_params)."""
    load_params()
    return yaml.safe_load(Path(os.environ.get("CORY_PARAMS") or ROOT / "params.yaml").read_text())


def dotted(spec: str) -> dict[str, Any]:
    """'ppo.lam=1,ppo.speed.compile=false' -> {'ppo': {'lam': 1, 'speed': {'compile': False}}}: comma-separated
    dotted KEY=VALUE settings, each value read as YAML, as the nested dict that cory.schema.merge takes."""
    return dotted_tree(spec.split(","))