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
`latest` is replaced by an atomic rename after the checkpoint is fully written, and older checkpoints are deleted
only then, so a kill at any moment leaves a complete checkpoint in force.
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

LATEST = "latest"


def save_checkpoint(directory: str | Path, trainer, extra: dict[str, Any]) -> Path:
    """Write the trainer's state after its last completed iteration (trainer.iteration - 1) into `directory`."""
    directory = Path(directory)
    name = f"it{trainer.iteration - 1:06d}"
    target = directory / name
    shutil.rmtree(target, ignore_errors=True)  # a half-written one from a kill during an earlier save
    target.mkdir(parents=True)
    for agent in trainer.agents:
        _save_lm_weights(agent, target / f"{agent.name}.safetensors")
        save_file(agent.value_head.state_dict(), str(target / f"{agent.name}.value_head.safetensors"))
        torch.save(agent.optimizer.state_dict(), target / f"{agent.name}.optimizer.pt")
    torch.save(
        {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
        target / "rng.pt",
    )
    state = {
        "trainer": trainer.state_dict(),
        "agents": {agent.name: agent.training_state() for agent in trainer.agents},
        "numpy_rng": _numpy_state(),
        "python_rng": _python_state(),
        "extra": extra,
    }
    (target / "state.json").write_text(json.dumps(state))
    pointer = directory / f"{LATEST}.tmp"
    pointer.write_text(name + "\n")
    os.replace(pointer, directory / LATEST)  # the checkpoint counts from here on
    for old in directory.glob("it*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return target


def checkpoint_extra(directory: str | Path) -> dict[str, Any] | None:
    """The `extra` of the newest checkpoint in `directory` (without loading any weights), or None."""
    pointer = Path(directory) / LATEST
    if not pointer.is_file():
        return None
    return json.loads((Path(directory) / pointer.read_text().strip() / "state.json").read_text())["extra"]


def load_checkpoint(directory: str | Path, trainer) -> dict[str, Any] | None:
    """Restore the trainer (agents, optimizers, RNGs) from the newest checkpoint in `directory`; return its `extra`,
    or None when there is none. The trainer must be built as for the saved run (same config, model and seed)."""
    directory = Path(directory)
    pointer = directory / LATEST
    if not pointer.is_file():
        return None
    source = directory / pointer.read_text().strip()
    state = json.loads((source / "state.json").read_text())
    for agent in trainer.agents:
        device = agent.device
        _load_lm_weights(agent, source / f"{agent.name}.safetensors")
        agent.refresh_copy()
        agent.value_head.load_state_dict(load_file(str(source / f"{agent.name}.value_head.safetensors"), device=str(device)))
        agent.optimizer.load_state_dict(torch.load(source / f"{agent.name}.optimizer.pt", map_location=device,
                                                   weights_only=True))
        agent.load_training_state(state["agents"][agent.name])
    trainer.load_state_dict(state["trainer"])
    rng = torch.load(source / "rng.pt", weights_only=True)
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    _set_numpy_state(state["numpy_rng"])
    random.setstate((state["python_rng"][0], tuple(state["python_rng"][1]), state["python_rng"][2]))
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
