"""Reading params files: strict YAML, the file a stage reads, and whether it changed while the stage ran.

DVC records, as the params a stage ran with, params.yaml as it finds it when the stage ends. Two ways that record
could name params a stage did not run with are closed here: a stage that DVC runs reads params.yaml only
(`params_path`: $CORY_PARAMS, which names another file, is for a side experiment run outside DVC, `CORY_PARAMS=side.yaml
python -m pipeline.train`), and a stage whose params file changed while it ran (an edit, a `dvc exp run -S` in another
shell) fails at its end with one line, before DVC records anything (`remember`, `changed_since_read`, checked by
pipeline.common.run_stage).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import yaml

from cory.schema import ConfigError
from pipeline.paths import ROOT, shown
from pipeline.single_writer import started_by_dvc


class StrictLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key repeated in one mapping is an error: safe_load keeps the last one, so a
    second `train:` block in a params or profile file would silently replace the first."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"{key!r} appears twice in one mapping", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


# YAML 1.2 floats without a dot (2e-05, 1E+3), which YAML 1.1 reads as strings: DVC writes params.yaml with a YAML 1.2
# writer, so `dvc exp run -S train.ppo.learning_rate=2e-5` leaves `learning_rate: 2e-05` in it.
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def read_yaml(path: str | os.PathLike, loader: type[yaml.SafeLoader] = StrictLoader) -> Any:
    """A YAML file's content. A syntax error or a repeated key is one ConfigError naming the file, line and column
    (`params.yaml:12:5: ...`), instead of yaml's traceback."""
    try:
        return yaml.load(Path(path).read_bytes(), Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        within = ""
        if exc.context and exc.context_mark is not None:
            within = f" ({exc.context} at line {exc.context_mark.line + 1})"
        raise ConfigError(f"{shown(path)}:{mark.line + 1}:{mark.column + 1}: {exc.problem}{within}") from None
    except yaml.YAMLError as exc:  # e.g. bytes that are no text encoding
        raise ConfigError(f"{shown(path)}: not a YAML file ({' '.join(str(exc).split())})") from None


def params_path(path: str | os.PathLike | None = None) -> Path:
    """The params file: `path`, else $CORY_PARAMS, else params.yaml at the project root. In a stage that DVC runs
    (`dvc repro`, `dvc exp run`), $CORY_PARAMS naming another file is one ConfigError: DVC would record params.yaml's
    settings for outputs made from the other file's."""
    if path:
        return Path(path)
    named, default = os.environ.get("CORY_PARAMS"), ROOT / "params.yaml"
    if named and started_by_dvc() and Path(named).resolve() != default.resolve():
        raise ConfigError(f"$CORY_PARAMS names {named}, but DVC runs this stage and records params.yaml's settings as "
                          "the ones it ran with: `unset CORY_PARAMS` before `dvc repro` (a side experiment runs a "
                          f"stage outside DVC: `CORY_PARAMS={named} python -m pipeline.<stage>`)")
    return Path(named or default)


READ: dict[Path, str | None] = {}
"""The params files this process has read, with the sha256 of what it read (`remember`)."""


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def remember(path: str | os.PathLike) -> None:
    """Note a params file's content as this process first reads it."""
    path = Path(path).resolve()
    READ.setdefault(path, _sha256(path))


def changed_since_read() -> list[Path]:
    """The params files this process read whose content is no longer what it read."""
    return [path for path, digest in READ.items() if _sha256(path) != digest]
