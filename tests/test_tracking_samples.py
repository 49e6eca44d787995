"""The samples table MLflow shows beside a run's metrics (cory.tracking.runs.samples_table): one row a generation,
and a training run's table growing with every logged iteration as it trains."""

import json

import pytest

from cory.tracking.runs import samples_table, start_run

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

from store_fixtures import SAMPLES, read_table  # noqa: E402
from store_fixtures import never_the_project_store, store  # noqa: E402, F401 (the store fixtures)


def test_samples_table_has_one_row_per_generation():
    assert samples_table(SAMPLES, iterations=2) == {
        "iteration": [-1, 0, 0, 1, 1, 2],
        "phase": ["before training", "training", "training", "training", "training", "after training"],
        "agent": ["llm1", "llm1", "llm2", "llm2", "llm1", "llm1"],
        "role": ["alone", "pioneer", "observer", "pioneer", "observer", "alone"],
        "query": ["I liked", "The film", "The film", "Acting", "Acting", "I liked"],
        "response": [" it", " was bad", " was fine", " good", " great", " it a lot"],
        "score": [0.5, -1.0, 1.0, 2.0, 3.0, 2.5],
        "prompt": ["I liked", "The film", "Better: The film was bad. The film", "Acting", "Better: Acting good. Acting",
                   "I liked"],
    }


def test_each_logged_iterations_generations_join_the_table_as_the_run_goes(store, tmp_path):
    """A training run sends its samples table row by row as it trains: LLM1 alone before training, each iteration that
    logs metrics (runtime.log_every), LLM1 alone after; the UI reads every logged iteration's generations beside the
    run's metrics, and the table's rows are samples.jsonl's and each logged iteration's."""
    import torch

    from cory.rl.config import CORYConfig, GenerationConfig, PPOConfig, TrainConfig
    from cory.runs.config import Job, TaskConfig
    from cory.runs.run import run_training
    from tiny import tiny_lm, tiny_tokenizer

    torch.set_num_threads(1)
    tiny_lm().save_pretrained(tmp_path / "model")
    tiny_tokenizer().save_pretrained(tmp_path / "model")
    words = ["the movie", "a film was", "the plot is", "not very good"]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"question": w, "answer": "#### 1"}) + "\n"
                                                    for w in words * 4))
    task = TaskConfig(model=str(tmp_path / "model"), prompts=str(tmp_path / "prompts.jsonl"), reward="math")
    ppo = PPOConfig(batch_size=4, mini_batch_size=4, generation=GenerationConfig(response_length=(3, 3)))
    train = TrainConfig(iterations=5, samples_to_log=2, ppo=ppo,
                        cory=CORYConfig(observer_template="{query} ({response}):"))
    job = Job("g", "cory", 0, train, task, task.model, str(tmp_path / "run"), False)
    with start_run("train", {}, run_name=job.name, profile="samples", outputs=tmp_path, key=job.name) as tracker:
        run_training(job, "cpu", tracker=tracker, log_every=2)
    table = read_table(MlflowClient(tracking_uri=store), tracker.run_id)
    # the fixed queries LLM1 answers alone: the first samples_to_log RL prompts (the task has no table_queries)
    logged = {-1: 2, 0: 4, 2: 4, 4: 4, 5: 2}  # iteration -> rows: 2 queries, 2 roles while training
    assert {i: table["iteration"].count(i) for i in set(table["iteration"])} == logged
    assert set(table["role"]) == {"alone", "pioneer", "observer"} and all(r.strip() for r in table["prompt"])
    rows = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    first_and_last = samples_table([r for r in rows if r["iteration"] in (-1, 0, 4, 5)], iterations=5)
    kept = [i for i, it in enumerate(table["iteration"]) if it != 2]
    assert {name: [column[i] for i in kept] for name, column in table.items()} == first_and_last
