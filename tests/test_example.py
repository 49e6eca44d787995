"""examples/cory_on_your_model.py, as a user runs it: CORY and the single-agent PPO baseline on a transformers causal
LM (its default: a tiny random GPT-2 built from a config, offline) with a Python reward, each saving plain
transformers folders."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_example_trains_cory_and_ppo_and_saves_plain_transformers_folders(tmp_path):
    from transformers import AutoModelForCausalLM

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, str(ROOT / "examples/cory_on_your_model.py"), "--iterations", "2",
                             "--out", str(tmp_path / "trained"), "--device", "cpu"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if " iteration " in line] == [
        "ppo iteration 0", "ppo iteration 1", "cory iteration 0", "cory iteration 1"]
    assert "llm2 reward" in lines[-2] and "llm2" not in lines[1]  # CORY trains two agents, PPO one
    for run, agents in (("ppo", ["llm1"]), ("cory", ["llm1", "llm2"])):
        folder = tmp_path / "trained" / run
        assert sorted(p.name for p in folder.iterdir()) == agents
        model = AutoModelForCausalLM.from_pretrained(folder / "llm1")  # no library of ours needed to read it
        assert model.config.n_layer == 2
        assert (folder / "llm1" / "tokenizer.json").is_file() and (folder / "llm1" / "value_head.safetensors").is_file()
    assert sum(line.startswith("saved ") for line in lines) == 2
