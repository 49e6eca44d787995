"""benchmark/phases.py: the FLOP arithmetic by hand, the weights a token multiplies against a built model, and the
phases of one iteration profiled on the CPU (operators per phase, peaks absent without a GPU)."""

import pytest
import torch

from benchmark.common import SMOLLM2, llama_matmul_params
from benchmark.phases import PHASES, Phases, forward_flops, held_memory, iteration_flops, matmul_weights, profile_phases


def test_forward_and_iteration_flops_by_hand():
    weights = (1000, 300, 2, 8)  # body, output layer, layers, width
    # a row of 3 prompt + 2 response tokens: the body on 5 tokens, the output layer on 2, attention 4 L d n^2
    assert forward_flops(weights, 3, 2) == 2 * 1000 * 5 + 2 * 300 * 2 + 4 * 2 * 8 * 25
    rows = [[(3, 2), (1, 4)], [(6, 2)]]  # a pioneer's two rows, an observer's one
    forward = sum(forward_flops(weights, p, t) for call in rows for p, t in call)
    assert iteration_flops(weights, rows, epochs=4) == {"generation": forward, "scoring": 0.0,
                                                       "experience": 2 * forward, "epochs": 12 * forward}


def test_the_weights_a_token_multiplies_match_built_models():
    from transformers import GPT2Config, GPT2LMHeadModel

    from benchmark.common import random_llama

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=100))
    body, head, layers, width = matmul_weights(gpt2.config)
    blocks = sum(p.numel() for n, p in gpt2.named_parameters() if ".h." in n and p.dim() == 2)
    assert (body, head, layers, width) == (blocks, 100 * 64, 2, 64)
    shape = {**SMOLLM2, "num_hidden_layers": 2}
    llama = random_llama(shape)
    body, head, layers, width = matmul_weights(llama.config)
    blocks = sum(p.numel() for n, p in llama.named_parameters() if ".layers." in n and p.dim() == 2)
    assert (body, head) == (blocks, 49152 * 576) == llama_matmul_params(shape)
    # SmolLM2-135M: 134,515,008 parameters = 30 blocks' matrices + the tied table + 61 norms of 576
    assert sum(llama_matmul_params(SMOLLM2)) + 61 * 576 == 134_515_008


def test_one_iteration_profiled_phase_by_phase_on_the_cpu():
    from tiny import QUERIES, config
    from tiny import good_word_reward, tiny_lm, tiny_tokenizer
    from cory.rl.trainer import Trainer

    torch.manual_seed(0)
    trainer = Trainer(config(n_agents=2), tiny_lm(), tiny_tokenizer(), good_word_reward, seed=0)
    phases = Phases(trainer)
    try:
        phases.start_iteration()
        seconds = phases.seconds(trainer.step(QUERIES))
        assert sum(seconds[p] for p in PHASES) == pytest.approx(seconds["iteration"], rel=1e-6)
        assert seconds["experience"] > 0 and len(phases.sequences) == 2  # the pioneer's rows, then the observer's
        assert all(len(rows) == len(QUERIES) for rows in phases.sequences)
        counts, tables = profile_phases(lambda: trainer.step(QUERIES))
        assert set(counts) == {"operators"} and all(counts["operators"][p] > 0 for p in PHASES)
        assert phases.process_peak_gib() is None and phases.peak_gib == {}
        held = held_memory(trainer)
        assert held["weights"] > 0 and held["gradients"] == 0.0  # none left between iterations
    finally:
        phases.close()
    from cory.rl import learner, trainer as module

    assert module.make_experience is learner.make_experience and module.PhaseTimer.__name__ == "PhaseTimer"
