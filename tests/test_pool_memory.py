"""The pool places runs by GPU memory, not count (pipeline.gpus.run_at_once with `needs`, pipeline.schedule.Needs), on
a simulated card: units on threads hold their true peak for a while, and one that starts where the others leave too
little runs out of memory, as a process would on a GPU. The card's free memory and the runs' needs are injected."""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import pipeline.gpus as gpus
from pipeline.schedule import OVERHEAD_GIB, Needs, estimated_peak, measured_peaks


class Card:
    """A GPU of `capacity` GiB: unit(name) holds `true[name]` GiB for `seconds[name]`, and raises torch's
    OutOfMemoryError at its start where what the running units hold leaves too little. `events` records, at each
    start and end, (time, {name: GiB} held, how many units wait: not started, or to start again)."""

    def __init__(self, monkeypatch, capacity: float, true: dict[str, float], seconds: dict[str, float]):
        import torch  # noqa: F401 - before the threads: torch's first import is not thread-safe

        monkeypatch.setattr(gpus, "worker_pool", lambda processes, names: ThreadPoolExecutor(processes))
        monkeypatch.setattr(gpus.gc, "collect", lambda: 0)  # no full collection after each unit (they hold nothing)
        self.capacity, self.true, self.seconds = capacity, true, seconds
        self.lock = threading.Lock()
        self.holding: dict[str, float] = {}
        self.finished: set[str] = set()
        self.events: list[tuple[float, dict[str, float], int]] = []
        self.most_at_once = 0

    def _note(self) -> None:
        waiting = len(self.true) - len(self.finished) - len(self.holding)
        self.events.append((time.monotonic(), dict(self.holding), waiting))
        self.most_at_once = max(self.most_at_once, len(self.holding))

    def unit(self, name: str) -> str:
        with self.lock:
            if sum(self.holding.values()) + self.true[name] > self.capacity:
                raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {self.true[name]} GiB ({name})")
            self.holding[name] = self.true[name]
            self._note()
        time.sleep(self.seconds[name])
        with self.lock:
            del self.holding[name]
            self.finished.add(name)
            self._note()
        return {"run": name, "peak_gpu_memory_gib": self.true[name]}

    def alone_while_others_wait(self, large: set[str]) -> float:
        """Seconds during which one large unit ran alone while other units waited to start."""
        seconds = 0.0
        for (t, held, waiting), (after, _, _) in zip(self.events, self.events[1:]):
            if len(held) == 1 and set(held) <= large and waiting > 0:
                seconds += after - t
        return seconds


def smollm2_and_scratch(large_gib: float, n_large: int = 4, n_small: int = 12):
    """Names, true peaks and seconds of a train stage's runs: SmolLM2-like runs of `large_gib`, longest, first in
    order, and scratch runs of 4 GiB."""
    large = [f"smollm2/ppo/seed{i}" for i in range(n_large)]
    small = [f"imdb/ppo/seed{i}" for i in range(n_small)]
    true = {**dict.fromkeys(large, large_gib), **dict.fromkeys(small, 4.0)}
    seconds = {**dict.fromkeys(large, 1.5), **dict.fromkeys(small, 0.4)}
    return large, small, true, seconds


def run(card: Card, names: list[str], needs: dict[str, float] | None, processes: int = 16, free: float = 80.0):
    """run_at_once on the card; as the train stage's Needs does, a unit that ends sets its kind's need to the peak it
    measured (with the overhead). Returns (the names of the units that ended, failures)."""
    def learn(name: str, summary: dict) -> None:
        for other in needs:
            if other.rsplit("/", 1)[0] == name.rsplit("/", 1)[0]:
                needs[other] = summary["peak_gpu_memory_gib"] + OVERHEAD_GIB

    calls = {name: (card.unit, (name,)) for name in names}
    results, failed = gpus.run_at_once(calls, processes, ["0"], False, "train", needs=needs,
                                       free_memory=lambda gpu: free, on_done=learn if needs else None)
    return [summary["run"] for summary in results], failed


def test_on_one_80_gb_card_the_runs_that_fit_run_together_and_none_runs_out_of_memory(monkeypatch, capsys):
    """Needs known (each run's peak and the overhead): as many runs at once as fit 90% of the card's free 80 GiB
    (72), three SmolLM2-like runs of 20 GiB beside the scratch runs; no run runs out of memory, and no SmolLM2 run runs
    alone while others wait."""
    large, small, true, seconds = smollm2_and_scratch(20.0)
    card = Card(monkeypatch, 80.0, true, seconds)
    results, failed = run(card, large + small, {name: gib + OVERHEAD_GIB for name, gib in true.items()})
    assert sorted(results) == sorted(large + small) and failed == {}
    said = capsys.readouterr().out
    assert "ran out of GPU memory" not in said and "[train] GPU 0: 80.0 GiB free; runs start as their peaks fit 72.0" \
        in said
    assert max(sum(held.values()) for _, held, _ in card.events) <= 72.0
    assert max(sum(1 for n in held if n in large) for _, held, _ in card.events) == 3
    assert card.alone_while_others_wait(set(large)) < 0.5


def test_runs_whose_need_was_underestimated_run_again_once_they_fit_and_never_alone_beside_waiting_runs(monkeypatch,
                                                                                                     capsys):
    """SmolLM2-like runs of 30 GiB estimated at 13: the first wave holds more than the card, the runs that started
    last run out of memory, and each starts again, its need doubled, once that fits, until a run of its kind ends and
    sets what it measured; all end, and no SmolLM2 run runs alone while scratch runs wait (placed by count, the pool
    fell to one run at a time, and SmolLM2 runs ran alone for minutes)."""
    large, small, true, seconds = smollm2_and_scratch(30.0)
    card = Card(monkeypatch, 80.0, true, seconds)
    needs = {**dict.fromkeys(large, 13.0), **dict.fromkeys(small, 5.0)}
    results, failed = run(card, large + small, needs)
    assert sorted(results) == sorted(large + small) and failed == {}
    said = capsys.readouterr().out
    assert "ran out of GPU memory" in said and "again once 26.0 GiB are free for it" in said  # a SmolLM2 run's 13
    assert card.alone_while_others_wait(set(large)) < 0.5


def test_a_run_too_large_for_the_card_runs_alone_and_out_of_memory_alone_is_final(monkeypatch):
    """A run that needs more than the whole budget starts once nothing else runs; one that runs out of memory alone
    (its true peak over the card) fails, named, and the others still run."""
    true = {"huge": 75.0, "a": 4.0, "b": 4.0, "too big": 90.0}
    card = Card(monkeypatch, 80.0, true, dict.fromkeys(true, 0.3))
    results, failed = run(card, list(true), {"huge": 76.0, "a": 5.0, "b": 5.0, "too big": 91.0})
    assert sorted(results) == ["a", "b", "huge"]
    assert list(failed) == ["too big"] and failed["too big"].startswith("OutOfMemoryError: CUDA out of memory")
    assert all(list(held) == ["huge"] for _, held, _ in card.events if "huge" in held)


def test_runtime_workers_stays_the_most_runs_at_once(monkeypatch):
    true = {f"r{i}": 1.0 for i in range(12)}
    card = Card(monkeypatch, 80.0, true, dict.fromkeys(true, 0.2))
    results, failed = run(card, list(true), dict.fromkeys(true, 2.0), processes=4)
    assert len(results) == 12 and failed == {} and card.most_at_once == 4


def test_without_a_readable_card_the_pool_places_by_count(monkeypatch):
    """No nvidia-smi answer (free memory None): the needs are not used, and runs start as places free up."""
    true = {f"r{i}": 1.0 for i in range(6)}
    card = Card(monkeypatch, 80.0, true, dict.fromkeys(true, 0.2))
    calls = {name: (card.unit, (name,)) for name in true}
    results, failed = gpus.run_at_once(calls, 3, ["0"], False, "train", needs=dict.fromkeys(true, 500.0),
                                       free_memory=lambda gpu: None)
    results = [summary["run"] for summary in results]
    assert len(results) == 6 and failed == {} and card.most_at_once == 3


# --------------------------------------------------------------------------------------------------------------------
# What each run needs: its kind's last measured peak, else an estimate; corrected as runs of its kind end
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def jobs(tmp_path):
    """Two kinds of runs (PPO and CORY, two seeds each) on a small GPT-2 in a local folder."""
    from cory.rl.config import IMDB_OBSERVER_TEMPLATE, CORYConfig, TrainConfig
    from cory.runs.config import Job, TaskConfig
    from tiny import tiny_lm, tiny_tokenizer

    tiny_lm(n_embd=32).save_pretrained(tmp_path / "model")
    tiny_tokenizer().save_pretrained(tmp_path / "model")
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"query": "the movie " * i}) + "\n" for i in (1, 8)))
    task = TaskConfig(model=str(tmp_path / "model"), prompts=str(tmp_path / "prompts.jsonl"), reward="math")
    made = []
    for run, agents in (("ppo", 1), ("cory", 2)):
        for seed in (0, 1):
            made.append(Job("g", run, seed, TrainConfig(cory=CORYConfig(
                n_agents=agents, observer_template=IMDB_OBSERVER_TEMPLATE)), task, task.model,
                            str(tmp_path / "runs" / run / f"seed{seed}"), False))
    return made


def test_a_kinds_need_is_its_last_measured_peak_else_an_estimate(jobs):
    ppo, _, cory, _ = jobs
    Path(ppo.run_dir).mkdir(parents=True)
    (Path(ppo.run_dir) / "summary.json").write_text(json.dumps({"peak_gpu_memory_gib": 3.0}))
    peaks = measured_peaks(jobs)
    assert peaks == {"g/ppo": 3.0}
    needs = Needs(jobs, peaks)
    assert needs["g/ppo/seed0"] == needs["g/ppo/seed1"] == 3.0 + OVERHEAD_GIB  # the other seed's too
    estimate = estimated_peak(cory)
    assert 0 < estimate < 1 and needs["g/cory/seed1"] == pytest.approx(estimate + OVERHEAD_GIB)
    assert estimated_peak(cory) > estimated_peak(ppo)  # two agents, and the observer's longer prompts
    larger = replace(cory, train=replace(cory.train, ppo=replace(cory.train.ppo, mini_batch_size=512,
                                                                  batch_size=512)))
    assert estimated_peak(larger) > estimated_peak(cory)
    assert estimated_peak(replace(cory, model="no/such-hub-model")) is None


def test_a_run_that_ends_teaches_its_kind_its_peak(jobs):
    needs = Needs(jobs, {})
    needs.learn("g/cory/seed0", {"peak_gpu_memory_gib": 5.5})
    assert needs["g/cory/seed1"] == needs["g/cory/seed0"] == 5.5 + OVERHEAD_GIB
    assert needs["g/ppo/seed0"] == pytest.approx(estimated_peak(jobs[0]) + OVERHEAD_GIB)  # another kind: as it was
    needs.learn("g/cory/seed1", {"peak_gpu_memory_gib": None})  # a CPU run measures nothing
    assert needs["g/cory/seed1"] == 5.5 + OVERHEAD_GIB
