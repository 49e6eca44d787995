"""Switch the pipeline's profile: `python -m pipeline.profile smoke` rewrites params.yaml.

profiles/default.yaml holds every setting; profiles/<name>.yaml holds only what a profile changes. params.yaml (what
DVC reads) is default.yaml deep-merged with the chosen overlay; a mapping tagged `!replace` in an overlay takes the
place of the default's instead of merging into it (the paper profile's hub models drop the scratch models' settings).
Every output path contains the profile's name (outputs/<profile>/, reports/<profile>/), so profiles never overwrite
each other's results.

params.yaml is the working copy: edit it, or let `dvc exp run -S key=value` edit it, to try a change; nothing at run
time compares it with the profiles (every stage validates its content, pipeline.params). A change worth keeping goes
into profiles/, and `python -m pipeline.profile NAME` regenerates params.yaml from them (tests check that the
committed params.yaml is the default profile's rendering).

dvc.lock records the last `dvc repro` of one profile, and metrics/ (DVC's views) its numbers and figures: after a
smoke run both hold the smoke profile's. Switching to a profile whose run the last commit recorded (`python -m
pipeline.profile default` after a smoke run) restores both from that commit (`restore_committed`), so the
workspace is the committed one again and `dvc status` compares with the committed run.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from cory.schema import ConfigError, merge
from pipeline.common import run_stage
from pipeline.params import DEVIATIONS, StrictLoader, read_yaml, validate
from pipeline.paths import ROOT, shown

PROFILES = Path(__file__).resolve().parents[1] / "profiles"  # not ROOT's: fixed once, whatever a caller patches
HEADER = (
    "# The settings `dvc repro` reads, written by `python -m pipeline.profile {name}` from profiles/default.yaml{source}.\n"
    "# A working copy: edit it (or run `dvc exp run -S key=value`) to try a change; keep a change in profiles/, since\n"
    "# a profile switch rewrites this file.\n"
)
NAMES = ("base_models", "tasks", "experiments", "experiments.*.runs", "evaluation.models")
"""Mappings whose keys are names (of models, tasks, groups, runs), not settings. Validation accepts any new name
there, so a misspelt name in a profile would add an entry (a run of defaults) instead of changing one: a profile may
only change the entries default.yaml has, and adds one only as a whole block tagged `!replace` (profiles/full.yaml's
groups), which says that the name is meant to be new."""


class Replace(dict):
    """An overlay's mapping tagged `!replace`: it replaces the default's mapping instead of merging into it."""


class OverlayLoader(StrictLoader):
    """The loader of profile files: StrictLoader with the `!replace` tag."""


OverlayLoader.add_constructor(
    "!replace", lambda loader, node: Replace(loader.construct_mapping(node, deep=True))
)


def overlay(base: dict, changes: dict) -> dict:
    """`changes` deep-merged into a copy of `base` (cory.schema.merge: mappings merge, except a Replace; everything
    else replaces), as plain dicts (yaml.safe_dump writes no dict subclass)."""
    return plain(merge(base, changes, replaces=lambda mapping: isinstance(mapping, Replace)))


def plain(tree: Any) -> Any:
    """`tree` with every mapping a plain dict."""
    return {key: plain(value) for key, value in tree.items()} if isinstance(tree, dict) else tree


def profile_names() -> list[str]:
    """The profiles: every profiles/<name>.yaml but deviations.yaml (prose the report reads, pipeline.params)."""
    return sorted(p.stem for p in PROFILES.glob("*.yaml") if p.name != DEVIATIONS.name)


def _read(path: Path) -> dict:
    content = read_yaml(path, OverlayLoader)
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ConfigError(f"{shown(path)}: must hold a mapping of settings, got {type(content).__name__}")
    return content


def _checked(params: dict, where: str) -> dict:
    try:
        validate(params)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return params


def check_names(changes: dict, base: dict, where: str, path: tuple[str, ...] = ()) -> None:
    """An overlay key under one of the NAMES mappings must name an entry that `base` (default.yaml) has."""
    is_names = any(
        len(pattern) == len(path) and all(p in ("*", part) for p, part in zip(pattern, path))
        for pattern in (names.split(".") for names in NAMES)
    )
    for key, value in changes.items():
        dotted = ".".join(map(str, (*path, key)))
        if is_names and key not in base and not isinstance(value, Replace):
            close = difflib.get_close_matches(str(key), list(map(str, base)), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"it has {', '.join(map(str, base))}"
            raise ConfigError(
                f"{where}: {dotted}: no such entry in profiles/default.yaml ({hint}); a profile changes the "
                f"default's entries, and adds one only as a whole block tagged !replace"
            )
        if isinstance(value, dict) and not isinstance(value, Replace) and isinstance(base.get(key), dict):
            check_names(value, base[key], where, (*path, str(key)))


def render(name: str) -> dict:
    """The full params tree of profile `name`, validated (pipeline.params) so a typo fails here, not mid-run.

    Errors name the file to fix: default.yaml is validated on its own first, so what fails once the overlay is
    merged in is the overlay's doing."""
    base = _checked(_read(PROFILES / "default.yaml"), shown(PROFILES / "default.yaml"))
    if name == "default":
        return base
    overlay_path = PROFILES / f"{name}.yaml"
    if name not in profile_names():
        raise ConfigError(f"profile {name!r}: no {shown(overlay_path)} (known profiles: {', '.join(profile_names())})")
    changes, where = _read(overlay_path), shown(overlay_path)
    if "profile" in changes:
        raise ConfigError(f"{where}: profile: set from the file's name ({name!r}); remove this key")
    check_names(changes, base, where)
    return _checked(overlay(base, {**changes, "profile": name}), where)


def changed_settings(params: dict) -> dict[str, object]:
    """The leaves of a params tree that differ from its profile's rendering (what `dvc exp run -S` or a hand edit
    changed), by dotted path; {} for params that are their profile."""
    from cory.schema import dotted_leaves

    ours, profile = dotted_leaves(params), dotted_leaves(render(params["profile"]))
    return {key: ours.get(key) for key in sorted(set(ours) | set(profile)) if ours.get(key) != profile.get(key)}


def write(name: str, path: Path = ROOT / "params.yaml") -> None:
    params = render(name)
    source = "" if name == "default" else f" + profiles/{name}.yaml"
    text = HEADER.format(name=name, source=source) + yaml.safe_dump(params, sort_keys=False, width=120)
    path.write_text(text)


COMMITTED_RUN = ("dvc.lock", "metrics")
"""What one profile's `dvc repro` rewrites outside that profile's own folders: the lock and DVC's views."""


def lock_profiles(text: str | None) -> set[str]:
    """The profiles whose runs a dvc.lock's stages record (their `profile` param): one, or more after a run of
    another profile that stopped part way."""
    try:
        stages = (yaml.safe_load(text) or {}).get("stages", {}) if text else {}
    except yaml.YAMLError:
        return set()
    return {stage.get("params", {}).get("params.yaml", {}).get("profile") for stage in stages.values()} - {None}


def _git(*args: str, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def restore_committed(name: str, root: Path = ROOT) -> bool:
    """Restore COMMITTED_RUN from the last commit where the workspace's dvc.lock is another profile's run and the
    commit's is profile `name`'s; True if restored. Nothing happens outside a git checkout, or where the lock is this
    profile's (a run of it not yet committed stays) or the commit holds no run of this profile."""
    lock = root / "dvc.lock"
    if not lock_profiles(lock.read_text() if lock.is_file() else None) - {name}:
        return False
    try:
        committed = _git("show", "HEAD:dvc.lock", root=root)
    except OSError:  # no git
        return False
    if committed.returncode != 0 or lock_profiles(committed.stdout) != {name}:
        return False
    paths = [path for path in COMMITTED_RUN if _git("ls-tree", "HEAD", "--", path, root=root).stdout.strip()]
    if _git("checkout", "HEAD", "--", *paths, root=root).returncode != 0:
        return False
    _git("clean", "-fq", "--", *paths, root=root)  # a figure only the other profile draws (the report writes metrics/)
    return True


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m pipeline.profile <default|smoke|paper>")
    write(argv[0])
    print(f"params.yaml now holds the {argv[0]!r} profile; run `dvc repro` to (re)build it.")
    if restore_committed(argv[0]):
        print(f"dvc.lock and metrics/ restored from the last commit: its {argv[0]!r} run (`git status` is clean of "
              "the other profile's run)")


if __name__ == "__main__":
    run_stage(lambda: main(sys.argv[1:]))
