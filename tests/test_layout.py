"""The repository's layout rules. The product (the library, the stages, the product benchmarks and tools, the reference
docs, the tests) never names the measurement lab in lab/, and the lab reaches into the product only through the
library and the public params API; no module is longer than one sitting's reading (400 lines); and no test module
imports another (shared fixtures live in helper modules: tiny.py, smoke.py, *_fixtures.py)."""

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB = "lab"

PUBLIC_PARAMS_API = {"pipeline.params": {"load_params"}, "pipeline.paths": {"out_dir"},
                     "pipeline.common": {"run_stage"}}
"""What the lab may import from the pipeline: the params tree, where a profile's outputs are, the stage runner."""

NAMES_THE_LAB = {
    "tests/test_layout.py": "these rules",
    ".ci/run": "CI runs the lab's tests after the suite",
}
"""Files outside lab/ that name it, and why."""

MAX_LINES = 400


def tracked(*patterns: str) -> list[Path]:
    """The files git tracks (the working tree's, untracked new files included) that match `patterns`."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *patterns], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


def text_of(path: Path) -> str | None:
    """A file's text, or None for a binary file (a figure, an archive)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


LAB_PATH = re.compile(r"(?<![\w./-])lab/")
LAB_MODULE = re.compile(r"(?<![\w.])lab\.[a-z_]")


def lab_mentions(text: str) -> list[str]:
    """The lines of `text` that name the lab: a path under lab/ or a module lab.<name>."""
    return [line.strip() for line in text.splitlines() if LAB_PATH.search(line) or LAB_MODULE.search(line)]


def test_the_check_finds_a_named_lab_and_nothing_else():
    assert lab_mentions("see lab/README.md\nfrom lab.bench import x\n`python -m lab.studies.variants`") == [
        "see lab/README.md", "from lab.bench import x", "`python -m lab.studies.variants`"]
    assert lab_mentions("collab/x, a/lab/b, slab.py, label.name, matlab.x, the lab's notebook") == []


def test_nothing_outside_the_lab_names_it():
    named = {}
    for path in tracked():
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(f"{LAB}/") or relative in NAMES_THE_LAB:
            continue
        text = text_of(path)
        if text is not None and (lines := lab_mentions(text)):
            named[relative] = lines[:3]
    assert not named, f"files outside {LAB}/ that name it: {named}"


def project_imports(path: Path) -> list[tuple[str, set[str]]]:
    """(module, names imported from it) of every import of `path` anywhere in its body (lazy imports included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, set()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, {alias.name for alias in node.names}))
    return found


def forbidden_for_the_lab(module: str, names: set[str]) -> bool:
    top = module.split(".")[0]
    if top in ("cory", LAB) or top not in ("pipeline", "benchmark", "tools", "tests"):
        return False  # the library, the lab itself, or not this project's (the standard library, torch, ...)
    allowed = PUBLIC_PARAMS_API.get(module)
    return allowed is None or not names or not names <= allowed


def test_the_import_check_allows_the_library_and_the_public_params_api_only():
    assert not forbidden_for_the_lab("cory.rl.ppo", {"gae"})
    assert not forbidden_for_the_lab("pipeline.params", {"load_params"})
    assert not forbidden_for_the_lab("yaml", set())
    assert forbidden_for_the_lab("pipeline.params", {"load_params", "read_yaml"})
    assert forbidden_for_the_lab("pipeline.params", set())  # import pipeline.params: all of it
    assert forbidden_for_the_lab("pipeline.gpus", {"run_at_once"})
    assert forbidden_for_the_lab("benchmark.common", {"queries_of"})


def test_the_lab_imports_only_the_library_and_the_public_params_api():
    modules = tracked(f"{LAB}/*.py")
    assert modules, f"no Python module under {LAB}/"
    reaching = {path.relative_to(ROOT).as_posix(): sorted(f"{module}: {sorted(names)}" for module, names in
                                                          project_imports(path) if forbidden_for_the_lab(module, names))
                for path in modules}
    reaching = {path: imports for path, imports in reaching.items() if imports}
    assert not reaching, f"{LAB}/ reaches past cory/ and {sorted(PUBLIC_PARAMS_API)}: {reaching}"


def test_no_module_is_longer_than_one_sitting():
    long = {path.relative_to(ROOT).as_posix(): n for path in tracked("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split each by concept): {long}"


def test_no_test_module_imports_another():
    """A test module's shared fixtures and helpers live in helper modules, so that a test module can be read, run
    and deleted on its own."""
    importing = {}
    for path in (path for path in tracked("*.py") if "tests" in path.relative_to(ROOT).parts):  # helpers too
        others = sorted(module for module, _ in project_imports(path) if module.split(".")[-1].startswith("test_"))
        if others:
            importing[path.relative_to(ROOT).as_posix()] = others
    assert not importing, f"test modules that import test modules (move what they share to a helper): {importing}"
