"""A run killed mid-way resumes from its last checkpoint and ends with the history of an uninterrupted run, bit for bit
(on CPU, where every kernel is deterministic): weights, value heads, Adam, KL controller, score moments, RNGs and the
batch sequence all come back."""

import pytest
import torch

from cory.runs.run import run_training

from run_fixtures import history, job, killed_on_step, task  # noqa: F401 (task: the tiny model and prompts, a fixture)


@pytest.mark.parametrize("n_agents, bf16_weights", [(1, False), (2, False), (2, True)])
def test_a_killed_run_resumes_to_the_uninterrupted_history(task, tmp_path, monkeypatch, n_agents, bf16_weights):
    """With ppo.speed.bf16_weights too: the checkpoint holds the fp32 weights, and the bf16 copy is made from them again."""
    torch.set_num_threads(1)
    whole = job(task, tmp_path / "whole", n_agents, bf16_weights)
    phases = run_training(whole, "cpu", checkpoint_every=2)["phase_seconds"]
    # where the wall time went: every phase this run had (no probe, no MLflow tracker), none negative
    assert set(phases) == {"setup", "samples", "iterations", "logging", "checkpoints", "save"}
    assert all(seconds >= 0 for seconds in phases.values()) and phases["iterations"] > 0

    killed = job(task, tmp_path / "killed", n_agents, bf16_weights)
    with killed_on_step(monkeypatch, 6):  # iterations 0-4 done, the checkpoint after iteration 3 in force
        run_training(killed, "cpu", checkpoint_every=2)
    assert len(history(tmp_path / "killed/run")) == 5 and (tmp_path / "killed/ckpt/resume/latest").is_file()
    summary = run_training(killed, "cpu", checkpoint_every=2)

    assert summary["resumed_after"] == 3
    assert history(tmp_path / "killed/run") == history(tmp_path / "whole/run")  # every value, as text
    assert (tmp_path / "killed/run/samples.jsonl").read_text() == (tmp_path / "whole/run/samples.jsonl").read_text()
    for agent in ["llm1", "llm2"][:n_agents]:
        a = (tmp_path / f"whole/ckpt/{agent}/model.safetensors").read_bytes()
        assert (tmp_path / f"killed/ckpt/{agent}/model.safetensors").read_bytes() == a
    assert not (tmp_path / "killed/ckpt/resume").exists()  # a complete run keeps no checkpoint


def test_a_checkpoint_of_another_fingerprint_is_refused(task, tmp_path, monkeypatch):
    first = job(task, tmp_path, 1)
    with killed_on_step(monkeypatch, 4):
        run_training(first, "cpu", checkpoint_every=2)
    first.fingerprint = "f2"
    with pytest.raises(ValueError, match="belongs to another version of g/r/seed0"):
        run_training(first, "cpu", checkpoint_every=2)


@pytest.mark.parametrize("n_agents", [1, 2])
def test_the_probe_leaves_training_as_it_is(task, tmp_path, n_agents):
    """train.probe_every: llm1/probe_task_reward at iterations 0, 3, 6 (and the last), and every other value of the
    history, the samples and the trained weights exactly those of a run without the probe (it samples from a fork of
    the RNG state)."""
    torch.set_num_threads(1)
    plain = job(task, tmp_path / "plain", n_agents)
    run_training(plain, "cpu")
    probed = job(task, tmp_path / "probed", n_agents)
    probed.train.probe_every, probed.train.probe_queries, probed.train.probe_samples = 3, 5, 2
    run_training(probed, "cpu")

    rows = history(tmp_path / "probed/run")
    probes = {int(r["iteration"]): r.pop("llm1/probe_task_reward") for r in rows}
    assert [it for it, v in probes.items() if v != ""] == [0, 3, 6]
    assert all(0.0 <= float(v) <= 1.0 for v in probes.values() if v != "")
    assert rows == history(tmp_path / "plain/run")
    assert (tmp_path / "probed/run/samples.jsonl").read_text() == (tmp_path / "plain/run/samples.jsonl").read_text()
    for agent in ["llm1", "llm2"][:n_agents]:
        a = (tmp_path / f"plain/ckpt/{agent}/model.safetensors").read_bytes()
        assert (tmp_path / f"probed/ckpt/{agent}/model.safetensors").read_bytes() == a
