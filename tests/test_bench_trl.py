"""benchmark/trl.py: the FLOP and MFU arithmetic, the result table, the trl-equivalent config of our side, and (where
trl 0.11.4's environment exists) the whole benchmark end to end on a tiny shape on the CPU."""

import json
import os
from pathlib import Path

import pytest

from benchmark.trl import SHAPES, main, matmul_params, mfu, ours_config, summarize, table, update_flops

TRL_ENV = Path(os.environ.get("CORY_TRL_ENV", "/tmp/trl_env"))


def test_matmul_params_are_the_weights_a_token_multiplies():
    """GPT-2 Large: 774,030,080 parameters, of which the position table (1024 x 1280), the biases and the layer
    norms multiply nothing; the tied token table is the output layer's weight."""
    layers, width, _ = SHAPES["gpt2-large"]
    n = matmul_params(layers, width)
    assert n == 36 * 12 * 1280**2 + 50257 * 1280 == 772_117_760
    biases_and_norms = 36 * (9 * 1280 + 4 * 1280) + 2 * 1280  # c_attn 3d, attn c_proj d, c_fc 4d, mlp c_proj d; 4 LN
    assert 774_030_080 - n == 1024 * 1280 + biases_and_norms


def test_matmul_params_match_a_built_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=50257))
    weights = sum(p.numel() for name, p in model.named_parameters()
                  if name.endswith(".weight") and p.dim() == 2 and ".h." in name)
    assert weights + model.transformer.wte.weight.numel() == matmul_params(2, 64)


def test_update_flops_and_mfu_by_hand():
    layers, width, vocab = 2, 8, 100
    n = 12 * 2 * 64 + 100 * 8  # 2336
    per_epoch = 6 * n * (3 + 5) + 12 * 2 * 8 * (3**2 + 5**2)  # two sequences of one agent: 3 and 5 tokens
    assert update_flops(layers, width, [[3, 5]], epochs=4, vocab=vocab) == 4 * per_epoch
    # a second agent's sequences add theirs
    assert update_flops(layers, width, [[3, 5], [7]], 1, vocab) == per_epoch + 6 * n * 7 + 12 * 2 * 8 * 49
    assert mfu(4e12, 2.0, 1e12) == 2.0


def fake(seconds: float, update: float, lengths: list[list[int]]) -> dict:
    return {"precision": "bf16", "seconds_per_iteration": seconds, "peak_gpu_gib": 12.5, "sequence_lengths": [lengths],
            "split": {"generation": seconds - update - 0.01, "scoring": 0.01, "update": update}}


def test_summary_ratios_and_table():
    results = summarize({"trl_fp32": fake(3.2, 2.0, [[20, 24]]), "trl_bf16": fake(1.6, 1.0, [[20, 24]]),
                         "ppo": fake(0.8, 0.5, [[20, 24]]), "cory": {"error": "Traceback ...\nRuntimeError: CUDA OOM"}},
                        (2, 64, 2), epochs=4, peak_flops=1e9)
    assert results["ppo"]["trl_over_this"] == pytest.approx({"trl_fp32": 4.0, "trl_bf16": 2.0})
    assert "trl_over_this" not in results["trl_bf16"]
    flops = update_flops(2, 64, [[20, 24]], 4)
    assert results["ppo"]["update_flops"] == flops and results["ppo"]["update_mfu"] == pytest.approx(flops / 0.5 / 1e9)
    assert results["ppo"]["tokens_per_iteration"] == 44 and results["ppo"]["same_sequence_lengths"]
    lines = table(results).splitlines()
    assert lines[0].split()[:3] == ["side", "precision", "s/it"] and len(lines) == 5
    assert "4.00x" in lines[3] and "2.00x" in lines[3] and f"{100 * flops / 0.5 / 1e9:.1f}%" in lines[3]
    assert "failed: RuntimeError: CUDA OOM" in lines[4]
    # a side that trained on other lengths is flagged
    other = summarize({"trl_fp32": fake(1, 0.5, [[20, 24]]), "ppo": fake(1, 0.5, [[20, 25]])}, (2, 64, 2), 4, 1e9)
    assert not other["ppo"]["same_sequence_lengths"]


def test_our_side_runs_trls_algorithm_with_the_profiles_speed_settings():
    cfg = ours_config({"profile": "paper", "new_tokens": 16, "batch": 256, "mini_batch": 256, "epochs": 4, "seed": 0,
                       "agents": 2})
    ppo = cfg.ppo
    assert (ppo.kl_penalty, ppo.init_kl_coef, ppo.use_score_scaling, ppo.dropout, ppo.ratio_threshold_mode) == (
        "full", 0.3, False, "trl", "trl")
    assert (ppo.batch_size, ppo.mini_batch_size, ppo.ppo_epochs, cfg.cory.n_agents) == (256, 256, 4, 2)
    assert ppo.generation.response_length == (16, 16) and ppo.generation.suppress_eos
    assert ppo.speed.fused_gelu and ppo.generation.cache == "graph"  # the paper profile's


@pytest.mark.skipif(not (TRL_ENV / "trl").is_dir(),
                    reason=f"no trl 0.11.4 environment at {TRL_ENV} ($CORY_TRL_ENV): `bash benchmark/trl_env.sh "
                           f"{TRL_ENV}` downloads and installs it (needs PyPI, about a minute)")
def test_the_whole_benchmark_on_a_tiny_shape(tmp_path, capsys):
    out = tmp_path / "trl_tiny.json"
    status = main(["--trl-env", str(TRL_ENV), "--shape", "tiny", "--batch", "8", "--mini-batch", "8", "--warmup", "1",
                   "--iterations", "1", "--out", str(out)])
    report = json.loads(out.read_text())
    results = report["results"]
    assert status == 0, {side: r.get("error") for side, r in results.items()}
    assert list(results) == ["trl_fp32", "trl_bf16", "ppo", "cory"]
    assert results["trl_fp32"]["versions"]["trl"] == "0.11.4"
    assert results["trl_fp32"]["versions"]["transformers"].startswith("4.")
    assert not results["ppo"]["versions"]["transformers"].startswith("4.")
    for side, r in results.items():
        assert r["seconds_per_iteration"] > 0 and r["update_mfu"] > 0, side
        assert r["same_sequence_lengths"], side  # every side's (pioneer's) sequences: query + 16 tokens
        assert all(length - 16 in range(2, 9) for length in r["sequence_lengths"][0][0]), side
    assert len(results["cory"]["sequence_lengths"][0]) == 2  # the observer's sequences count too
    assert results["ppo"]["trl_over_this"].keys() == {"trl_fp32", "trl_bf16"}
    assert "trl bf16 / this" in capsys.readouterr().out


def test_our_side_times_each_iteration_and_counts_what_regional_compilation_compiled(tmp_path):
    """Our side alone (no trl environment needed): each timed iteration's seconds, and the graphs compiled, none of
    them while timed (every iteration samples for the same queries and the same number of tokens)."""
    out = tmp_path / "ours_tiny.json"
    status = main(["--shape", "tiny", "--only", "ppo", "--batch", "8", "--mini-batch", "8", "--warmup", "2",
                   "--iterations", "2", "--speed", "compile=regional", "--out", str(out)])
    ppo = json.loads(out.read_text())["results"]["ppo"]
    assert status == 0, ppo.get("error")
    assert len(ppo["iteration_seconds"]) == 2 and all(s > 0 for s in ppo["iteration_seconds"])
    assert ppo["compiled_graphs"] > 0 and ppo["graphs_compiled_while_timed"] == 0
    assert sum(ppo["graph_break_reasons"].values()) == ppo["graph_breaks"]
    assert ppo["sequence_lengths"][0] == ppo["sequence_lengths"][1]
