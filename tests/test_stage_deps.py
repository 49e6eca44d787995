"""dvc.yaml's code deps are complete: every module of this project that a stage imports, at the top of a file or
inside a function, directly or through another module, is a dep of that stage. A dep missing there means a change
to that file leaves the stage's cached results in place, silently stale."""

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cory", "pipeline")


def module_file(name: str) -> Path | None:
    """The file of a module of this project's packages (a package's is its __init__.py), or None for anything else
    (torch, a name imported from a module)."""
    if name.split(".")[0] not in PACKAGES:
        return None
    path = ROOT / name.replace(".", "/")
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def with_packages(name: str) -> list[str]:
    """A module and the packages above it, which importing it runs first: cory.rl.ppo -> cory, cory.rl, cory.rl.ppo."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def imported_modules(path: Path) -> set[str]:
    """The project modules one file imports anywhere in its body (lazy imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from cory import ppo`
    return {package for name in names if module_file(name) for package in with_packages(name)}


NOT_FOLLOWED = {
    # the schema of the whole params tree: every stage validates all of it before it starts, but computes from its own
    # sections, whose modules it imports itself (base_models: cory.tasks.config through cory.tasks.pretrain)
    "pipeline.params": "every stage",
}
"""Modules whose own imports a stage's walk does not follow (the module itself is still a dep), and for which stages."""


def closure(module: str) -> set[str]:
    """The repo-relative files a stage's module `module` needs, itself and its packages included."""
    seen, todo = set(), with_packages(module)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if NOT_FOLLOWED.get(name) == "every stage" and name != module:  # the `params` stage runs it: all of it
            continue
        todo.extend(imported_modules(module_file(name)))
    return {str(module_file(name).relative_to(ROOT)) for name in seen}


def stages() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def test_the_import_walk_sees_lazy_and_transitive_imports_and_packages():
    needed = closure("pipeline.train")
    assert "pipeline/params.py" in needed
    assert "cory/rl/ppo.py" in needed and "cory/rl/decoding.py" in needed  # through run_training's lazy imports
    assert "cory/__init__.py" in needed and "cory/rl/__init__.py" in needed  # the packages a module is in
    assert "cory/tasks/pretrain.py" in closure("pipeline.base_models")  # the stage's own lazy import
    assert "cory/rl/trainer.py" not in closure("pipeline.report")
    assert module_file("cory.rl") == ROOT / "cory/rl/__init__.py" and module_file("cory.rl.ppo.gae") is None


@pytest.mark.parametrize("name", sorted(stages()))
def test_every_module_a_stage_imports_is_one_of_its_deps(name):
    stage = stages()[name]
    module = stage["cmd"].split("python -m ", 1)[1].split()[0]
    deps = {dep for dep in stage["deps"] if isinstance(dep, str)}
    missing = sorted(closure(module) - deps)
    assert not missing, f"dvc.yaml: stage {name!r} imports {missing} but does not list them as deps"


@pytest.mark.parametrize("name", sorted(stages()))
def test_every_code_dep_of_a_stage_exists(name):
    code = [dep for dep in stages()[name]["deps"] if dep.endswith(".py")]
    assert [dep for dep in code if not (ROOT / dep).is_file()] == []
