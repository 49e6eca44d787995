"""benchmark/grpo.py: our side's trl-equivalent config, the shared tokenizer, and the benchmark end to end on the tiny
shape on the CPU (our side always; trl's where trl 1.16 is installed in $CORY_TRL_GRPO_ENV)."""

import json
import os
from pathlib import Path

import pytest

from benchmark.grpo import SHAPES, main, ours_config, table, words, write_tokenizer

TRL_ENV = Path(os.environ.get("CORY_TRL_GRPO_ENV", "/tmp/algos-venv/site"))


def test_our_side_runs_grpo_with_the_trl_sides_settings():
    cfg = ours_config({"profile": "smoke", "new_tokens": 16, "prompts": 64, "answers": 4, "epochs": 4, "beta": 0.04,
                       "seed": 0, "speed": {"bf16_weights": False}, "cache": "dynamic"})
    ppo = cfg.ppo
    assert (cfg.algorithm, cfg.grpo.kl_coef, cfg.cory.n_agents) == ("grpo", 0.04, 1)
    assert (ppo.batch_size, ppo.mini_batch_size, ppo.samples_per_query, ppo.queries_per_batch) == (256, 256, 4, 64)
    assert (ppo.ppo_epochs, ppo.cliprange, ppo.max_grad_norm, ppo.use_score_scaling) == (4, 0.2, None, False)
    generation = ppo.generation
    assert (generation.response_length, generation.suppress_eos, generation.repetition_penalty) == ((16, 16), True, 1.0)
    assert (generation.cache, ppo.speed.bf16_weights) == ("dynamic", False)


def test_every_id_of_the_tokenizer_decodes_to_one_word(tmp_path):
    from transformers import AutoTokenizer

    assert len(words(SHAPES["smollm2"]["vocab"])) == 49152 == len(set(words(49152)))
    write_tokenizer(tmp_path, 512)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.padding_side) == (0, 0, "left")
    assert tokenizer("the movie was", add_special_tokens=False).input_ids == [words(512).index(w)
                                                                               for w in ("the", "movie", "was")]
    assert tokenizer.decode(list(range(2, 512))).split() == words(512)[2:]


def test_the_table_puts_trls_seconds_over_ours():
    results = {"trl": {"precision": "bf16 autocast", "seconds_per_iteration": 3.0, "split": None, "peak_gpu_gib": 20.0,
                       "answer_tokens": 16.0},
               "ours": {"precision": "bf16 weights", "seconds_per_iteration": 1.5, "peak_gpu_gib": 10.0,
                        "answer_tokens": 16.0, "split": {"generation": 0.5, "scoring": 0.1, "update": 0.9}}}
    lines = table(results).splitlines()
    assert lines[0].split()[:3] == ["side", "precision", "s/it"] and "2.00x" in lines[1]
    assert "0.500 / 0.100 / 0.900" in lines[2] and "16.00" in lines[2]


@pytest.mark.parametrize("sides", [["ours"], ["trl", "ours"]])
def test_the_benchmark_runs_end_to_end_on_the_tiny_shape(tmp_path, sides):
    if "trl" in sides and not (TRL_ENV / "trl").is_dir():
        pytest.skip(f"no trl 1.16 in {TRL_ENV} (pip install --no-deps --target DIR trl==1.16.0; $CORY_TRL_GRPO_ENV)")
    out = tmp_path / "grpo.json"
    code = main(["--trl-env", str(TRL_ENV), "--shape", "tiny", "--prompts", "2", "--answers", "4", "--epochs", "2",
                 "--warmup", "1", "--iterations", "1", "--beta", "0.04", "--profile", "smoke", "--cache", "dynamic",
                 "--only", *sides, "--out", str(out)])
    report = json.loads(out.read_text())
    assert code == 0, {side: r.get("error") for side, r in report["results"].items()}
    for side in sides:
        r = report["results"][side]
        assert r["seconds_per_iteration"] > 0 and len(r["iteration_seconds"]) == 1
        assert r["answer_tokens"] == 16.0  # every answer the full 16 tokens, on both sides
    if "trl" in sides:
        settings = report["results"]["trl"]["settings"]
        assert (settings["loss_type"], settings["scale_rewards"], settings["num_iterations"]) == ("dapo", "group", 2)
