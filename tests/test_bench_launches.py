"""benchmark/launches.py: the operators that launch work in one forward and backward pass, counted on the CPU."""

import pytest

from benchmark import launches


def test_each_layer_adds_the_same_launches_and_views_are_not_counted():
    from transformers import GPT2Config, GPT2LMHeadModel

    counts = [launches.launches(GPT2LMHeadModel(GPT2Config(n_layer=n, n_embd=32, n_head=2, vocab_size=50)), 2, 6)
              for n in (1, 2, 3)]
    assert counts[0] > 0 and counts[2] - counts[1] == counts[1] - counts[0] > 0  # linear in the depth
    assert {"aten::view", "aten::empty"} <= launches.NO_LAUNCH


def test_the_command_names_each_model_and_needs_one(capsys):
    launches.main(["--gpt2", "2", "32", "2", "50", "--batch", "2", "--tokens", "6"])
    assert capsys.readouterr().out.startswith("launches: gpt2 2x32, 2 heads, vocab 50: ")
    with pytest.raises(SystemExit):
        launches.main([])
