"""Faults a run survives, each injected and its outcome asserted: a kept unit whose files are damaged is trained again
(naming the file), a damaged resume checkpoint restarts its run (naming the file), a failed checkpoint write leaves
the one in force, a damaged file of one run stops no other, a model's training record (its wall-clock seconds) is no
part of the fingerprints of the runs that read it, and MLflow going away mid-run is one warning."""

import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import pipeline.jobs as jobs
import pipeline.train as stage
from cory.rl.checkpoint import checkpoint_extra
from pipeline.units import finished_summary, plan
from cory.rl import checkpoint
from cory.runs.run import run_training
from pipeline.units import RECORD, content_digest

from project_fixtures import project  # noqa: F401 (a test project with data for the base models, a fixture)
from run_fixtures import history, job, killed_on_step, task  # noqa: F401 (task: the tiny model and prompts, a fixture)
from tiny import tok  # noqa: F401 (the tiny tokenizer the project fixture uses)
from tiny import tiny_lm, tiny_tokenizer


@pytest.fixture
def finished(task, tmp_path):  # noqa: F811 - task is run_fixtures' fixture
    """Two finished CORY runs that save their agents, as the train stage leaves them."""
    torch.set_num_threads(1)
    jobs = [replace(job(task, tmp_path / name, 2), run=name) for name in ("a", "b")]
    for one in jobs:
        run_training(one, "cpu")
    return jobs


def flip_a_byte(path: Path, at: int = -100) -> None:
    """One bit of the file flipped: its size stays, its content does not."""
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_finished_run_whose_files_match_its_record_is_kept(finished):
    for one in finished:
        summary = finished_summary(one)
        assert summary is not None and summary["files"]["history.csv"]["lines"] == 1 + 7
        assert set(summary["saved_files"]) >= {"llm1/model.safetensors", "llm2/value_head.safetensors"}


def test_a_truncated_history_is_trained_again_naming_it(finished, capsys):
    history_csv = Path(finished[0].run_dir) / "history.csv"
    history_csv.write_text("".join(history_csv.read_text().splitlines(True)[:-1]))  # a row lost
    assert finished_summary(finished[0]) is None
    assert f"[train] g/a/seed0: {history_csv}: 7 lines, its record says 8: trained again" in capsys.readouterr().out
    done, todo, _ = plan(finished, checkpoint_extra)
    assert [j.run for j in todo] == ["a"] and list(done) == ["g/b/seed0"]  # the other run is kept
    # it starts from nothing, beside the damaged one, which it replaces once it has finished
    assert todo[0].run_dir == finished[0].run_dir + ".next" and not Path(todo[0].run_dir).exists()


@pytest.mark.parametrize("damage", ["flipped byte", "missing"])
def test_damaged_saved_weights_are_trained_again_naming_them(finished, capsys, damage):
    weights = Path(finished[1].checkpoint_dir) / "llm2" / "model.safetensors"
    flip_a_byte(weights) if damage == "flipped byte" else weights.unlink()
    assert finished_summary(finished[1]) is None
    said = capsys.readouterr().out
    assert f"{weights}: " in said and ("differs from the recorded sha256" if damage == "flipped byte" else "missing") \
        in said
    assert [j.run for j in plan(finished, checkpoint_extra)[1]] == ["b"]


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_a_damaged_summary_names_its_file_and_stops_no_other_run(finished, capsys, damage):
    summary = Path(finished[0].run_dir) / "summary.json"
    text = summary.read_text()
    summary.write_text(text[: len(text) // 2] if damage == "truncated" else "\0" * len(text))
    done, todo, _ = plan(finished, checkpoint_extra)
    assert [j.run for j in todo] == ["a"] and list(done) == ["g/b/seed0"]
    assert f"[train] g/a/seed0: {summary}: not a readable JSON file (" in capsys.readouterr().out


def test_a_damaged_file_of_a_run_is_named_where_the_report_reads_it(finished, tmp_path):
    from cory.report.results import load_run

    seed = tmp_path / "report" / "a" / "seed0"  # the layout the report reads: <run>/seed<k>/
    shutil.copytree(finished[0].run_dir, seed)
    summary = seed / "summary.json"
    summary.write_text(summary.read_text()[:20])
    with pytest.raises(ValueError, match=rf"^{summary}: not a readable JSON file \(Unterminated string"):
        load_run(seed.parent)


def killed_run(task, where, monkeypatch, n_agents=1):  # noqa: F811
    """A run killed after iteration 4, its checkpoint after iteration 3 in force (test_resume's kill)."""
    killed = job(task, where, n_agents)
    with killed_on_step(monkeypatch, 6):
        run_training(killed, "cpu", checkpoint_every=2)
    return killed


@pytest.mark.parametrize("damage", ["truncated weights", "garbled optimizer", "garbled state.json", "missing rng",
                                    "a bit flipped in the weights", "a bit flipped in the optimizer"])
def test_a_damaged_checkpoint_is_named_and_its_run_starts_over(task, tmp_path, monkeypatch, capsys, damage):  # noqa: F811
    """A flipped bit keeps the file's size and loads without an error (the lowest bit of a weight, of an Adam
    moment): its sha256, recorded when the checkpoint was written, names it."""
    torch.set_num_threads(1)
    whole = job(task, tmp_path / "whole", 1)
    run_training(whole, "cpu", checkpoint_every=2)
    killed = killed_run(task, tmp_path / "killed", monkeypatch)
    folder = next((Path(killed.checkpoint_dir) / "resume").glob("it*"))
    file = {"truncated weights": "llm1.safetensors", "garbled optimizer": "llm1.optimizer.pt",
            "garbled state.json": "state.json", "missing rng": "rng.pt", "a bit flipped in the weights":
            "llm1.safetensors", "a bit flipped in the optimizer": "llm1.optimizer.pt"}[damage]
    path = folder / file
    size = path.stat().st_size
    if damage.startswith("a bit flipped"):
        flip_a_byte(path, at=size // 2)
        assert path.stat().st_size == size
    elif damage == "truncated weights":
        path.write_bytes(path.read_bytes()[:1000])
    elif damage == "missing rng":
        path.unlink()
    else:
        path.write_bytes(b"\x80garbage" + b"\0" * (path.stat().st_size - 8))  # the recorded size, other content
    capsys.readouterr()
    summary = run_training(killed, "cpu", checkpoint_every=2)
    said = capsys.readouterr().out
    assert f"[train] g/r/seed0: {path}: " in said and "the run starts over" in said
    if damage.startswith("a bit flipped"):
        assert f"{path}: its content differs from the recorded sha256" in said
    assert summary["resumed_after"] is None  # from nothing, and to the uninterrupted run's history
    assert history(tmp_path / "killed/run") == history(tmp_path / "whole/run")


def test_a_killed_runs_history_shorter_than_its_checkpoint_restarts_the_run(task, tmp_path, monkeypatch, capsys):  # noqa: F811
    killed = killed_run(task, tmp_path, monkeypatch)
    history_csv = Path(killed.run_dir) / "history.csv"
    history_csv.write_text("".join(history_csv.read_text().splitlines(True)[:3]))  # 2 rows; the checkpoint covers 4
    summary = run_training(killed, "cpu", checkpoint_every=2)
    assert f"{history_csv}: holds 2 rows, fewer than the 4 iterations" in capsys.readouterr().out
    assert summary["resumed_after"] is None and len(history(Path(killed.run_dir))) == 7


def test_the_train_stage_starts_over_a_run_whose_checkpoint_state_is_garbled(task, tmp_path, monkeypatch, capsys):  # noqa: F811
    killed = killed_run(task, tmp_path, monkeypatch)
    state = next((Path(killed.checkpoint_dir) / "resume").glob("it*")) / "state.json"
    state.write_text("{")
    _, todo, _ = plan([killed], checkpoint_extra)  # one error named, the run in todo from nothing; the stage goes on
    assert todo == [killed] and f"{state}: cannot be read" in capsys.readouterr().out
    assert not Path(killed.checkpoint_dir).exists()


def test_a_failed_checkpoint_write_leaves_no_partial_and_the_previous_one_in_force(task, tmp_path, monkeypatch):  # noqa: F811
    """A full disk during the second save (iteration 3): the save raises, its partial folder is removed, `latest`
    still names the first checkpoint, and a rerun resumes there to the uninterrupted history."""
    torch.set_num_threads(1)
    whole = job(task, tmp_path / "whole", 2)
    run_training(whole, "cpu", checkpoint_every=2)
    real_save, saves = torch.save, []

    def disk_full(obj, path, *args, **kwargs):
        if str(path).endswith("rng.pt"):
            saves.append(path)
            if len(saves) == 2:
                raise OSError(28, "No space left on device")
        return real_save(obj, path, *args, **kwargs)

    failing = job(task, tmp_path / "failing", 2)
    monkeypatch.setattr(checkpoint.torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        run_training(failing, "cpu", checkpoint_every=2)
    monkeypatch.setattr(checkpoint.torch, "save", real_save)
    resume = Path(failing.checkpoint_dir) / "resume"
    assert sorted(p.name for p in resume.iterdir()) == ["it000001", "latest"]  # no it000003.partial
    assert (resume / "latest").read_text().strip() == "it000001"
    summary = run_training(failing, "cpu", checkpoint_every=2)
    assert summary["resumed_after"] == 1
    assert history(tmp_path / "failing/run") == history(tmp_path / "whole/run")


def test_wall_clock_seconds_in_a_models_record_leave_the_runs_fingerprints(tmp_path):
    """A base model trained again to the same weights writes another training.json (its seconds): the runs that read
    it keep their fingerprints. Its weights are what counts."""
    from cory.rl.config import TrainConfig
    from cory.runs.config import Job, TaskConfig

    model, reward = tmp_path / "model", tmp_path / "reward"
    for folder in (model, reward):
        tiny_lm().save_pretrained(folder)
        tiny_tokenizer().save_pretrained(folder)
        (folder / RECORD).write_text(json.dumps({"history": [{"step": 2, "seconds": 1.5}], "fingerprint": "m"}))
    (tmp_path / "prompts.jsonl").write_text('{"query": "the movie"}\n')
    run = Job("g", "r", 0, TrainConfig(), TaskConfig(model=str(model), prompts=str(tmp_path / "prompts.jsonl"),
              reward="sentiment", reward_model=str(reward)), str(model), str(tmp_path / "run"), False)

    def fingerprint() -> str:
        content_digest.cache_clear()  # one stage process hashes each folder once; here they change in between
        return jobs.fingerprint(run, "code")

    before = fingerprint()
    for folder in (model, reward):
        (folder / RECORD).write_text(json.dumps({"history": [{"step": 2, "seconds": 9.25}], "fingerprint": "m"}))
    assert fingerprint() == before
    flip_a_byte(reward / "model.safetensors")
    assert fingerprint() != before


def test_the_store_deleted_mid_run_is_one_warning_and_the_outputs_are_intact(task, tmp_path, monkeypatch, capfd):  # noqa: F811
    from cory.rl.trainer import Trainer

    store = tmp_path / "store"
    store.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store / 'mlflow.db'}")
    real_step = Trainer.step

    def step(self, *args, **kwargs):
        if self.iteration == 1:
            shutil.rmtree(store, ignore_errors=True)
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "step", step)
    runs = [replace(job(task, tmp_path / name, 1), run=name) for name in ("a", "b")]
    for one in runs:
        stage.run_job(one, "test", 1, 0, {"g": "math"}, 10)
    err = capfd.readouterr().err
    warnings = [line for line in err.splitlines() if "MLflow unavailable" in line]
    assert len(warnings) == 1 and warnings[0].startswith("WARNING: MLflow unavailable ("), err[-3000:]
    assert "Traceback" not in err and "ERROR" not in err, err[-3000:]
    for one in runs:
        rows = list(csv.DictReader(open(Path(one.run_dir) / "history.csv")))
        assert len(rows) == 7 and finished_summary(one) is not None


@pytest.mark.parametrize("damage", ["flipped byte in the weights", "truncated record", "missing tokenizer",
                                    "garbled metrics"])
def test_a_damaged_base_model_is_trained_again_naming_the_file(project, tmp_path, monkeypatch, capsys, damage):
    """A base model whose folder or outputs are not what its record (training.json) says is trained again by the
    stage, which names the file; the same model's weights come back (CPU training is deterministic)."""
    import pipeline.base_models as models
    from pipeline.paths import out_dir

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setattr(models, "code_digest", lambda name, leave_out=(): "code")
    monkeypatch.setattr(models, "load_params", lambda: project)
    models.main(["math"])
    folder = out_dir(project, "models", "math")
    weights = (folder / "model.safetensors").read_bytes()
    path = {"flipped byte in the weights": folder / "model.safetensors", "truncated record": folder / RECORD,
            "missing tokenizer": folder / "tokenizer.json",
            "garbled metrics": out_dir(project, "metrics", "base_models", "math.json")}[damage]
    if damage == "flipped byte in the weights":
        flip_a_byte(path)
    elif damage == "missing tokenizer":
        path.unlink()
    else:
        path.write_text(path.read_text()[:30])
    capsys.readouterr()
    models.main(["math"])
    said = capsys.readouterr().out
    assert f"[base_models] math: {path}: " in said and ": trained again" in said, said
    assert "1 models: 0 unchanged (kept), 1 to train" in said
    assert (folder / "model.safetensors").read_bytes() == weights
    models.main(["math"])
    assert "1 models: 1 unchanged (kept: math), 0 to train" in capsys.readouterr().out
