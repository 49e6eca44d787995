"""The project's modules import each other without a cycle: the import graph of cory/, pipeline/, benchmark/ and
tools/ (every import, at the top of a file or inside a function) has no loop, so each module can be read, and
imported, after the ones it uses."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cory", "pipeline", "benchmark", "tools")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `path` imports anywhere (lazy imports included), as module names; `from a import b`
    counts as an import of a.b where that is a module, else of a."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                         for a in node.names)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports(path, modules) - {name} for name, path in modules.items()}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_walk_finds_a_cycle_where_there_is_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_walk_sees_the_project_modules_and_their_imports():
    graph = import_graph()
    assert "cory.rl.trainer" in graph and "pipeline.train" in graph
    assert "cory.rl.rollout" in graph["cory.rl.trainer"]
    assert "cory.rl.decoding" in graph["cory.rl.rollout"]


def test_no_import_cycle_among_the_project_modules():
    found = cycle(import_graph())
    assert found is None, "import cycle: " + " -> ".join(found)
