"""scripts/bench_paper.py on tiny stand-ins of the paper profile's models (CPU): every field of scale.json, and the
projection as the sum of its parts."""

import json

import pytest
import yaml

from cory.config import merge
from pipeline.profile import render
from scripts import bench_paper, build_standins


@pytest.fixture(scope="module")
def standin_params(tmp_path_factory):
    root = tmp_path_factory.mktemp("standins")
    build_standins.main([str(root / "models"), "--scale", "tiny", "--offline-data", "--reviews", "200"])
    params = merge(render("paper"), yaml.safe_load((root / "models" / build_standins.OVERLAY).read_text()))
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path, params


def test_scale_json_of_the_paper_runs_on_standins(standin_params, tmp_path, monkeypatch):
    path, params = standin_params
    monkeypatch.setenv("CORY_PARAMS", str(path))
    out = tmp_path / "scale.json"
    small = ["load_in_4bit=false", "ppo.batch_size=4", "ppo.mini_batch_size=2", "ppo.gradient_accumulation_steps=1",
             "ppo.forward_batch_size=null", "ppo.generation.response_length=[4, 6]"]
    bench_paper.main(["--iterations", "1", "--only", "imdb/ppo", "math/cory", "--out", str(out),
                      *[arg for item in small for arg in ("--set", item)]])
    result = json.loads(out.read_text())
    assert result["profile"] == "paper" and set(result["runs"]) == {"imdb/ppo", "math/cory"}
    ppo, cory = result["runs"]["imdb/ppo"], result["runs"]["math/cory"]
    assert ppo["model"].endswith("gpt2-large") and cory["model"].endswith("Llama-2-7b-chat-hf")
    assert ppo["params_trainable"] > ppo["params_total"]  # full fine-tuning: every weight and the value head
    assert cory["lora_rank"] == 16 and 0 < cory["params_trainable"] < cory["params_total"] / 2  # two adapters
    for run in (ppo, cory):
        assert run["batch_size"] == 4 and run["iterations_timed"] == 1 and run["peak_gpu_gib"] is None
        assert run["seconds_per_iteration"] == pytest.approx(sum(run["split"].values()))
    # projection: each run x its seeds (x etas) x train.iterations, one after another
    seeds, iterations = len(params["seeds"]), params["train"]["iterations"]
    parts = result["projection"]["per_run_seconds"]
    assert parts["imdb/ppo"] == pytest.approx(seeds * ppo["train_iterations"] * ppo["seconds_per_iteration"])
    assert ppo["train_iterations"] == iterations
    assert result["projection"]["seconds"] == pytest.approx(sum(parts.values()))
