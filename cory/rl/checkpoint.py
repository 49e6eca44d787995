"""Resumable RL runs: a run's whole training state at the end of an iteration, saved so that a crash cannot corrupt it.

A checkpoint holds everything the next iteration depends on, so that a run killed after iteration k and resumed from
its checkpoint ends with the same history as an uninterrupted run of the same seed:

- each agent's weights and value head (safetensors), its Adam state, KL coefficient and running score moments;
  an agent that is a LoRA adapter on a shared base saves its adapter only (the frozen base is the run's model, loaded
  again on resume: the run's fingerprint covers it), so a 7B CORY checkpoint is megabytes, not two 13 GB copies;
- the trainer's iteration, role assignment and response-length RNG; torch's (CPU and CUDA), numpy's and Python's
  global RNGs (sampling and the PPO mini-batch order draw from torch's);
- whatever the caller adds (`extra`: the samples logged so far, the seconds spent).

Layout: `<directory>/it<k>/` per checkpoint and `<directory>/latest`, a one-line file naming the newest complete one.
A checkpoint is written into `it<k>.partial/` and renamed to `it<k>/` once complete; `latest` is then replaced by an
atomic rename, and older checkpoints are deleted only then, so a kill at any moment leaves a complete checkpoint in
force. A save that fails (a full disk) removes its partial folder and raises; the one in force stays.

A checkpoint that cannot be read back (a file missing, truncated, or of other content: its state.json records every
other file's size and sha256, checked before anything is loaded) is a CheckpointError naming the file; the run then
starts over (cory.runs.run), it never stops the stage. A bit flipped in the weights would otherwise load without an
error and train on from damaged values, as the run's own result.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from cory.files import folder_records, mismatch

LATEST = "latest"
PARTIAL = ".partial"
"""Suffix of a checkpoint folder being written."""
STATE = "state.json"


class CheckpointError(ValueError):
    """A checkpoint that cannot be read back; the message names its file."""


def save_checkpoint(directory: str | Path, trainer, extra: dict[str, Any]) -> Path:
    """Write the trainer's state after its last completed iteration (trainer.iteration - 1) into `directory`."""
    directory = Path(directory)
    name = f"it{trainer.iteration - 1:06d}"
    target, partial = directory / name, directory / f"{name}{PARTIAL}"
    shutil.rmtree(partial, ignore_errors=True)  # a half-written one from a kill during an earlier save
    partial.mkdir(parents=True)
    try:
        for agent in trainer.agents:
            _save_lm_weights(agent, partial / f"{agent.name}.safetensors")
            if agent.value_head is not None:  # a critic-free agent has none (train.algorithm)
                save_file(agent.value_head.state_dict(), str(partial / f"{agent.name}.value_head.safetensors"))
            torch.save(agent.optimizer.state_dict(), partial / f"{agent.name}.optimizer.pt")
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
        torch.save({"torch": torch.get_rng_state(), "cuda": cuda}, partial / "rng.pt")
        state = {
            "trainer": trainer.state_dict(),
            "agents": {agent.name: agent.training_state() for agent in trainer.agents},
            "numpy_rng": _numpy_state(),
            "python_rng": _python_state(),
            "extra": extra,
            "files": folder_records(partial),  # each file's size and sha256, checked before a resume
        }
        (partial / STATE).write_text(json.dumps(state))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # no partial checkpoint stays behind a failed save
        raise
    pointer = directory / f"{LATEST}.tmp"
    pointer.write_text(name + "\n")
    os.replace(pointer, directory / LATEST)  # the checkpoint counts from here on
    for old in directory.glob("it*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return target


def _state(directory: Path, contents: bool = True) -> tuple[Path, dict[str, Any]] | None:
    """(the folder of the checkpoint in force, its state), checked against the sizes and (with `contents`) sha256 it
    records; None where there is no checkpoint; CheckpointError naming the file that is missing, of another size or
    content, or not JSON."""
    pointer = directory / LATEST
    if not pointer.is_file():
        return None
    source = directory / pointer.read_text().strip()
    file = source / STATE
    try:
        state = json.loads(file.read_text())
        damaged = (mismatch if contents else _size_mismatch)(source, state["files"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{file}: cannot be read ({type(exc).__name__}: {exc})") from None
    if damaged:
        raise CheckpointError(f"{damaged} (the checkpoint's record)")
    return source, state


def _size_mismatch(source: Path, records: dict[str, dict[str, Any]]) -> str | None:
    """mismatch's check without reading the files: only whether each is there, of its recorded size."""
    for name, record in sorted(records.items()):
        path = source / name
        if not path.is_file():
            return f"{path}: missing"
        if path.stat().st_size != record["bytes"]:
            return f"{path}: {path.stat().st_size} bytes, its record says {record['bytes']}"
    return None


def checkpoint_extra(directory: str | Path) -> dict[str, Any] | None:
    """The `extra` of the newest checkpoint in `directory` (without loading or hashing any weights: its files'
    presence and sizes are checked, their content when the run loads it), or None."""
    found = _state(Path(directory), contents=False)
    return None if found is None else found[1]["extra"]


def load_checkpoint(directory: str | Path, trainer) -> dict[str, Any] | None:
    """Restore the trainer (agents, optimizers, RNGs) from the newest checkpoint in `directory`; return its `extra`,
    or None when there is none. The trainer must be built as for the saved run (same config, model and seed). A file
    that cannot be loaded is a CheckpointError naming it, the trainer then half restored: build it again."""
    found = _state(Path(directory))
    if found is None:
        return None
    source, state = found
    file = source / STATE
    try:
        for agent in trainer.agents:
            device = agent.device
            file = source / f"{agent.name}.safetensors"
            _load_lm_weights(agent, file)
            agent.refresh_copy()
            file = source / f"{agent.name}.value_head.safetensors"
            if agent.value_head is not None:
                agent.value_head.load_state_dict(load_file(str(file), device=str(device)))
            file = source / f"{agent.name}.optimizer.pt"
            agent.optimizer.load_state_dict(torch.load(file, map_location=device, weights_only=True))
            file = source / STATE
            agent.load_training_state(state["agents"][agent.name])
        trainer.load_state_dict(state["trainer"])
        file = source / "rng.pt"
        rng = torch.load(file, weights_only=True)
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        file = source / STATE
        _set_numpy_state(state["numpy_rng"])
        random.setstate((state["python_rng"][0], tuple(state["python_rng"][1]), state["python_rng"][2]))
    except Exception as exc:  # noqa: BLE001 - whatever the loader raises (safetensors', pickle's, a shape), one error
        text = " ".join(str(exc).split())[:300]
        raise CheckpointError(f"{file}: cannot be loaded ({type(exc).__name__}: {text})") from None
    return state["extra"]


def _save_lm_weights(agent, file: Path) -> None:
    """Every weight of an agent's own model (save_model handles GPT-2's tied embeddings), or its adapter's only."""
    if agent.adapter is None:
        save_model(agent.lm, str(file))
    else:
        save_file({name: p.detach().contiguous() for name, p in agent.lm_weights().items()}, str(file))


def _load_lm_weights(agent, file: Path) -> None:
    if agent.adapter is None:
        load_model(agent.lm, str(file), device=str(agent.device))
        return
    weights = agent.lm_weights()
    saved = load_file(str(file))
    if set(saved) != set(weights):
        raise ValueError(f"{file}: holds adapter weights {sorted(set(saved) ^ set(weights))[:4]} that do not match "
                         f"{agent.name}'s adapter (another lora_rank or model?)")
    with torch.no_grad():
        for name, p in weights.items():
            p.copy_(saved[name])


def _numpy_state() -> list:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def _set_numpy_state(state: list) -> None:
    kind, keys, pos, has_gauss, cached = state
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


def _python_state() -> list:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]
