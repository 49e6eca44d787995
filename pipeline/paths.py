"""Where the pipeline's files are: the project root, how a message names a file, and each profile's output folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cory.schema import check


ROOT = Path(__file__).resolve().parents[1]
"""The project root (where params.yaml and dvc.yaml live); stages run from here."""


def shown(path: str | os.PathLike) -> str:
    """How a message names a file: relative to the project root when it is inside it, else as given."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def check_profile(name: Any) -> str:
    check(isinstance(name, str) and name.isidentifier(), "profile",
          f"must be a simple name like 'default' or 'smoke', got {name!r}")
    return name


def out_dir(params, *parts: str) -> Path:
    """outputs/<profile>/<parts...> of `params` (pipeline.params.Params): each profile writes under its own folder, so
    profiles never mix."""
    return ROOT / "outputs" / params.profile / Path(*parts)
