"""Switching a source in one step: each `dvc exp run -S ...` line the README documents, applied by DVC's own parser
to the default profile's params.yaml, validates; without its removals (`-S '~KEY'`), one error names every setting
the new source leaves unread, with the arguments that remove them."""

import shlex

import pytest

from cory.schema import ConfigError
from pipeline.params import load_params
from pipeline.paths import ROOT
from pipeline.profile import write

dvc_hydra = pytest.importorskip("dvc.utils.hydra")


def readme_switches() -> list[list[str]]:
    """The -S arguments of each `dvc exp run` line of the README's block on switching a source."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("**Switching a source in one step.**", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    switches = []
    for line in filter(None, block.splitlines()):
        words = shlex.split(line, comments=True)
        assert words[:3] == ["dvc", "exp", "run"], line
        switches.append([words[i + 1] for i, word in enumerate(words) if word == "-S"])
    return switches


def applied(tmp_path, overrides: list[str]):
    path = tmp_path / "params.yaml"
    write("default", path)
    dvc_hydra.apply_overrides(path, overrides)
    return load_params(path)


def test_the_readme_documents_a_model_and_a_data_switch_with_removals():
    switches = readme_switches()
    assert len(switches) >= 4
    assert any(o.startswith("base_models.") and o.endswith("source=HuggingFaceTB/SmolLM2-135M-Instruct")
               for s in switches for o in s)
    assert any(o.startswith("~") for s in switches for o in s) and any(o.startswith("+") for s in switches for o in s)


@pytest.mark.parametrize("overrides", readme_switches(), ids=lambda o: o[0].split("=")[0])
def test_each_documented_switch_validates_and_without_its_removals_names_them_all_at_once(tmp_path, overrides):
    applied(tmp_path, overrides)
    removals = [o[1:] for o in overrides if o.startswith("~")]
    if not removals:
        return
    kept = [o for o in overrides if not o.startswith("~")]
    with pytest.raises(ConfigError) as error:
        applied(tmp_path, kept)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'params.yaml'}: {', '.join(removals)}: ignored: "), message
    assert message.endswith(" ".join(f"-S '~{name}'" for name in removals)), message
    assert "\n" not in message
