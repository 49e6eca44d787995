"""benchmark/evaluate.py on the CPU (the smoke profile's math shape): it saves distinct random models and times
the evaluate stage's two ways, which give the same numbers."""

import sys

from benchmark.common import profile_params


def test_both_ways_run_and_agree(tmp_path, monkeypatch, capsys):
    from benchmark import evaluate as bench_evaluate

    monkeypatch.setenv("CORY_PARAMS", str(profile_params("smoke", tmp_path)))
    runs = bench_evaluate.save_models(tmp_path / "models", 2)
    assert [(name, seed) for name, seed, _ in runs] == [("random", "0"), ("random", "1")]
    weights = [(folder / "model.safetensors").read_bytes() for _, _, folder in runs]
    assert weights[0] != weights[1]  # a seed per run: a mix-up between runs would show in their samples
    monkeypatch.setattr(sys, "argv", ["bench_evaluate", "--runs", "2", "--workers", "2"])
    bench_evaluate.main()
    out = capsys.readouterr().out
    assert "one after another:" in out and "at once (runtime.workers 2):" in out
    assert "the same pass@k, correct counts and samples both ways: True" in out
