"""The reference docs (README.md, docs/*.md) agree with the code: every dotted setting they name in backquotes is one
the params schema has, every link finds its file and heading, and every measurement they show is a table generated
from a committed file (tools/docs_tables.py). And no error message states a count or a duration it does not compute:
such a number goes stale the day the profile changes."""

import ast
import dataclasses
import importlib.util
import re
import types
import typing
from pathlib import Path

import pytest

from cory.rl.config import TrainConfig
from pipeline.params import Params

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FILE_SUFFIXES = {"md", "json", "jsonl", "csv", "yaml", "yml", "py", "sh", "txt", "png", "tgz", "lock", "toml", "db",
                 "safetensors", "gguf", "whl", "log", "html", "gz"}
DOTTED = re.compile(r"(?<![\w/.$-])([a-z_][a-z0-9_]*(?:\.(?:[a-z0-9_]+|<[a-z_]+>|\*))+)")
"""A dotted name in backquoted text: `train.ppo.speed.compile`, `base_models.<name>.gguf`, `train.ppo.speed.*`."""


def resolves(cls: type, parts: list[str]) -> bool:
    """Whether `parts` is a path of settings in dataclass `cls`: each part a field, any name under a mapping of
    names (`<name>` or a group's), anything under an untyped mapping (a run's overrides), any field for `*`."""
    tp: typing.Any = cls
    for part in parts:
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            kinds = [kind for kind in typing.get_args(tp) if kind is not type(None)]
            tp = kinds[0] if len(kinds) == 1 else tp
        if part == "*":
            return True
        if typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
            if tp is typing.Any:
                return True
        elif dataclasses.is_dataclass(tp) and part in (fields := typing.get_type_hints(tp)):
            tp = fields[part]
        else:
            return False
    return True


def is_code(name: str) -> bool:
    """Whether `name` or a prefix of it is an importable module (`cory.rl.ppo`, `cory.tasks.gguf.load_gguf`)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        try:
            if importlib.util.find_spec(".".join(parts[:n])) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def unknown_setting(name: str) -> bool:
    """A dotted name that starts as a setting does (a top-level section of params.yaml, or of its `train` block, which
    the docs also write without `train.`) and is no setting of the schema. Files and code are not settings."""
    parts = name.split(".")
    if parts[-1] in FILE_SUFFIXES or is_code(name):
        return False
    for root in (Params, TrainConfig):
        if parts[0] in typing.get_type_hints(root):
            return not resolves(root, parts)
    return False


def named_settings(text: str) -> list[tuple[int, str]]:
    return [(n, name) for n, line in enumerate(text.splitlines(), 1) for span in re.findall(r"`([^`]+)`", line)
            for name in DOTTED.findall(span)]


def test_the_settings_check_finds_a_moved_setting_and_passes_the_rest():
    text = ("`ppo.compile` moved to `train.ppo.speed.compile`; `ppo.speed.compile: regional`, "
            "`base_models.<name>.gguf`, `experiments.math.runs.ppo.train.ppo.lam`, `train.ppo.speed.*`, "
            "`runtime.workers=2`; not settings: `cory.rl.ppo`, `cory.tasks.gguf.load_gguf`, `params.yaml`, "
            "`samples.md`, `outputs/default/eval/passk.json`")
    assert [name for _, name in named_settings(text) if unknown_setting(name)] == ["ppo.compile"]
    assert unknown_setting("train.ppo.speed.compiled") and unknown_setting("runtime.worker")
    assert unknown_setting("base_models.<name>.gguf.sha") and not unknown_setting("evaluation.authors_protocol.enabled")


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_setting_a_doc_names_is_in_the_schema(doc):
    unknown = [f"{doc.name}:{n}: {name}" for n, name in named_settings(doc.read_text()) if unknown_setting(name)]
    assert not unknown, f"settings the params schema does not have (moved? renamed?): {unknown}"


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a file's headings: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.MULTILINE):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_link_of_a_doc_finds_its_file_and_heading(doc):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.name}: {broken}"


def test_the_docs_measurement_tables_are_their_files():
    from tools.docs_tables import tables

    stale = [str(path) for path, text in tables().items() if text != path.read_text()]
    assert not stale, f"tables that are not their committed file's: {stale} (python -m tools.docs_tables)"


COUNT_OR_DURATION = re.compile(r"(?<![\w.{])\d[\d,.]*\s*(?:minutes?|hours?|seconds?|days?|runs?|models?|iterations?"
                               r"|seeds?|processes|GB|GiB|MB|MiB)\b", re.IGNORECASE)
"""A number that states how many or how long: in a message it must be computed, not written into the text."""


def written_text(node: ast.AST) -> str:
    """The text of a message as written in the code: its literal parts, each computed part as `{}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(value.value if isinstance(value, ast.Constant) else "{}" for value in node.values)
    if isinstance(node, ast.BinOp):
        return written_text(node.left) + written_text(node.right)
    return ""


def messages(tree: ast.AST) -> dict[int, str]:
    """{line: text} of what a module raises, exits with, prints or warns."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", "")
            if name in ("print", "exit", "warn") or name.endswith(("Error", "Exit", "Exception")):
                found[node.lineno] = " ".join(written_text(arg) for arg in node.args)
    return found


def test_the_message_check_finds_a_written_count_and_passes_a_computed_one():
    code = ('raise ConfigError(f"the {name!r} profile trains 48 runs in about 10 minutes")\n'
            'raise ConfigError(f"the {name!r} profile trains {len(runs)} runs, {minutes:.0f} minutes on one H100")\n'
            'print(f"{len(failed)} of {len(todo)} models failed; pass@16 of 200 problems")\n')
    found = {line: COUNT_OR_DURATION.findall(text) for line, text in messages(ast.parse(code)).items()}
    assert found == {1: ["48 runs", "10 minutes"], 2: [], 3: []}


def test_no_message_states_a_count_or_duration_it_does_not_compute():
    written = []
    for package in ("cory", "pipeline", "benchmark", "tools"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, text in messages(ast.parse(path.read_text())).items():
                written += [f"{path.relative_to(ROOT)}:{line}: {found!r}" for found in COUNT_OR_DURATION.findall(text)]
    assert not written, f"messages that state a count or a duration as written text: {written}"
