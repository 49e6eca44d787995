"""benchmark/rl.py's run builder (CPU): a --variant changes the run's resolved settings, including those its
experiment group sets, and the math run gets math problems its corpus vocabulary tokenizes without bytes."""

from pathlib import Path

import pytest

from benchmark.rl import build

REPO = Path(__file__).resolve().parents[1]


def test_a_variant_changes_a_setting_the_group_sets(tmp_path, monkeypatch):
    from benchmark.common import profile_params

    # the default profile, whatever the working copy's params.yaml holds
    monkeypatch.setenv("CORY_PARAMS", str(profile_params("default", tmp_path)))
    variant = "ppo.mini_batch_size=128,ppo.gradient_accumulation_steps=1,ppo.generation.cache=dynamic"
    cfg, lm, tokenizer, reward, queries, answers = build("math", "cory", tmp_path, variant)
    assert (cfg.ppo.mini_batch_size, cfg.ppo.gradient_accumulation_steps, cfg.ppo.generation.cache) == (128, 1, "dynamic")
    assert cfg.iterations == 100 and cfg.ppo.samples_per_query == 8  # the group's other settings stay
    assert len(queries) == len(answers) == cfg.ppo.queries_per_batch
    # The observer's prompt holds the query, the pioneer's 80 tokens and the template's words; with its own 80 tokens
    # it stays within the model's 256 positions (IMDB-like word openings split into bytes here and did not).
    longest = max(len(tokenizer(q).input_ids) for q in queries)
    assert longest + 2 * 80 + 16 < lm.config.n_positions, longest
    default, *_ = build("math", "cory", tmp_path, "")
    assert (default.ppo.mini_batch_size, default.ppo.generation.cache) != (128, "dynamic")


class CountingBarrier:
    def __init__(self):
        self.waits = 0

    def wait(self):
        self.waits += 1


def test_concurrent_processes_start_their_timed_iterations_together(tmp_path, monkeypatch):
    """Each process waits twice: once its models are built, and once its warm-up (where compilations happen, each of
    its own length) is over, so that the processes' timed iterations run side by side and none is timed partly alone
    (which once made a compiled variant look 2.1x faster instead of 1.17x)."""
    from benchmark.rl import time_iterations
    from benchmark.common import profile_params

    monkeypatch.setenv("CORY_PARAMS", str(profile_params("smoke", tmp_path)))
    barrier = CountingBarrier()
    result = time_iterations("math", "ppo", iterations=1, warmup=1, barrier=barrier)
    assert barrier.waits == 2
    assert result["wall_per_iteration"] > 0 and result["warmup_seconds"] > 0
    # the phases split the iteration, and each has its FLOPs (the scoring none)
    phases = ("generation", "scoring", "experience", "epochs")
    assert sum(result[p] for p in phases) == pytest.approx(result["iteration"], rel=1e-6)
    assert all(result["flops"][p] > 0 for p in phases if p != "scoring") and result["flops"]["scoring"] == 0
    assert result["flops"]["epochs"] == 3 * 4 * result["flops"]["generation"]  # 4 epochs of forward + backward
    held = result["held_gib"]
    assert held["weights"] > 0 and held["optimizer"] == pytest.approx(2 * held["weights"], rel=0.01)
    assert held["sampling"] > 0 and held["reference"] == pytest.approx(held["weights"], rel=0.01)
    assert result["peak_gib"] is None  # no GPU


def test_a_loaded_model_is_built_at_its_architecture_and_measured_phase_by_phase(tmp_path, monkeypatch):
    """The default profile's SmolLM2 CORY run (base_models.smollm2 is a GGUF file, not at hand) on a random Llama of the
    known architecture (here cut down to 2 small layers) with the word-level stand-in tokenizer, with the new pass
    settings: each phase's seconds, FLOPs and operators, the tensors held, a checkpoint's seconds, no graph break."""
    from benchmark import common
    from benchmark.common import profile_params
    from benchmark.rl import side_by_side, time_iterations

    monkeypatch.setenv("CORY_PARAMS", str(profile_params("default", tmp_path)))
    small = {**common.SMOLLM2, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}
    monkeypatch.setitem(common.RANDOM_MODELS, "smollm2", small)
    variant = ("ppo.batch_size=8,ppo.mini_batch_size=8,ppo.speed.last_hidden=true,"
               "ppo.speed.compile=regional,ppo.speed.update_batch_size=4")
    result = time_iterations("imdb_smollm2", "cory", iterations=1, warmup=1, profile=True, variant=variant,
                             checkpoint=True)
    assert result["graph_breaks"] == 0 and result["compiled_graphs"] > 0
    assert set(result["profile"]) == {"operators"} and all(result["profile"]["operators"][p] > 0
                                                           for p in ("generation", "experience", "epochs"))
    assert result["held_gib"]["sampling"] > 0 and result["held_gib"]["reward model"] > 0
    assert result["checkpoint_seconds"] > 0 and result["checkpoint_gib"] > 0
    assert result["flops"]["epochs"] == 3 * 4 * result["flops"]["generation"]
    table = side_by_side({"the profile's settings": result, "broken": {"error": "RuntimeError: out of memory"}})
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["variant", "s/it"] and "failed: RuntimeError: out of memory" in lines[2]
