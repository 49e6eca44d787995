"""On a GPU: ppo.speed's pass settings (last_hidden, compile with pad_shapes, update_batch_size below a mini-batch)
give the eager passes' numbers within bf16 rounding, compile each padded shape once, and a run gives back every
byte of GPU memory it held once it is gone (what a worker process that runs one run after another relies on).

    python -m pytest tests/gpu/test_speed_settings.py
"""

from __future__ import annotations

import gc

import pytest
import torch

from cory.rl.agents import build_agents
from cory.rl.config import CORYConfig, GenerationConfig, PPOConfig, SpeedConfig, TrainConfig
from cory.rl.learner import make_experience, ppo_update
from cory.rl.trainer import Trainer

from tiny import QUERIES, good_word_reward, padded_rollout, tiny_llama, tiny_tokenizer  # tests/tiny.py (conftest)

GPU_SPEED = dict(bf16_weights=True, fused_vocab=True, align_head=True)
"""The default profile's speed settings for its SmolLM2 runs."""


def update_on_gpu(**speed):
    torch.manual_seed(0)
    cfg = TrainConfig(seed=0, ppo=PPOConfig(batch_size=8, mini_batch_size=8, learning_rate=1e-3, ppo_epochs=2,
                                            dropout="none", speed=SpeedConfig(**GPU_SPEED, **speed)),
                      cory=CORYConfig(n_agents=1))
    lm = tiny_llama(hidden_size=64, intermediate_size=128, num_hidden_layers=3).cuda()
    from cory.rl.kernels import prepare_for_rl

    prepare_for_rl(lm, cfg.ppo.speed)
    (agent,), reference = build_agents(cfg, lm)
    agent.optimizer = torch.optim.SGD(agent.parameters(), lr=0.1)  # Adam would turn rounding near 0 into whole steps
    exp = make_experience(agent, reference, padded_rollout().to(torch.device("cuda")),
                          torch.linspace(-1, 1, 8, device="cuda"))
    stats = ppo_update(agent, exp, torch.Generator().manual_seed(0))
    return exp, stats, [p.detach().float().cpu() for p in agent.parameters()]


@pytest.mark.parametrize("speed", [dict(last_hidden=True), dict(last_hidden=True, compile="regional"),
                                   dict(last_hidden=True, compile=True, pad_shapes=16),
                                   dict(last_hidden=True, update_batch_size=2)],
                         ids=["last_hidden", "regional", "whole padded", "split"])
def test_the_settings_give_the_eager_update_within_bf16_rounding(speed):
    eager, eager_stats, eager_weights = update_on_gpu()
    exp, stats, weights = update_on_gpu(**speed)
    T, mask = eager.logprobs.shape[1], eager.mask.float()
    for name in ("logprobs", "values", "advantages"):  # bf16 passes: a few bf16 steps apart
        torch.testing.assert_close(getattr(exp, name)[:, :T] * mask, getattr(eager, name) * mask, rtol=0.05,
                                   atol=0.05, msg=name)
    assert stats["policy_loss"] == pytest.approx(eager_stats["policy_loss"], abs=0.05)
    for a, b in zip(weights, eager_weights):
        torch.testing.assert_close(a, b, rtol=0.02, atol=1e-3)


def test_padded_compiled_passes_compile_each_shape_once():
    """Responses of 4-16 tokens and prompts of a few widths fall into few padded shapes: after the warm-up
    iterations that met them, the timed ones compile nothing."""
    from benchmark.common import CompileCount

    torch._dynamo.reset()
    cfg = TrainConfig(seed=0, iterations=8, ppo=PPOConfig(
        batch_size=16, mini_batch_size=16, dropout="none",
        speed=SpeedConfig(**GPU_SPEED, last_hidden=True, compile=True, pad_shapes=16),
        generation=GenerationConfig(response_length=(4, 16), repetition_penalty=1.0, cache="graph",
                                    cache_length=64)), cory=CORYConfig(n_agents=2))
    trainer = Trainer(cfg, tiny_llama(hidden_size=64, intermediate_size=128).cuda(), tiny_tokenizer(),
                      good_word_reward, seed=0)
    for _ in range(4):
        trainer.step(QUERIES)
    count = CompileCount()
    count.timing_starts()
    for _ in range(4):
        trainer.step(QUERIES)
    fields = count.fields()
    assert fields["graphs_compiled_while_timed"] == 0 and fields["graph_breaks"] == 0, fields


@pytest.mark.parametrize("fails", [False, True], ids=["ends", "fails in its update"])
@pytest.mark.parametrize("speed", [dict(), dict(last_hidden=True, compile="regional", pad_shapes=16)],
                         ids=["profile", "compiled"])
def test_a_run_gives_back_its_gpu_memory_when_it_is_gone(speed, fails, monkeypatch):
    """A worker of the train stage runs one run after another (pipeline.gpus.release_memory_after), a run that ran out
    of memory again in the same worker, and reads each run's peak from where the last one left the allocator: whatever
    a finished or failed run leaves allocated (the CUDA graphs of its compiled decoding steps and their memory pool,
    which torch.compile keeps after their models are gone; its tensors, held by a frame) counts in every later run's
    peak (the repro's SmolLM2 runs: 16-42 GiB against 9-18 GiB alone), and is not the GPU's."""
    from cory.rl import learner
    from pipeline.gpus import release_memory_after

    torch.cuda.synchronize()
    gc.collect()
    before = torch.cuda.memory_allocated()

    def one_run() -> int:
        cfg = TrainConfig(seed=0, ppo=PPOConfig(
            batch_size=16, mini_batch_size=16, dropout="none", speed=SpeedConfig(**GPU_SPEED, **speed),
            generation=GenerationConfig(response_length=(4, 8), repetition_penalty=1.0, cache="graph",
                                        cache_length=64)), cory=CORYConfig(n_agents=2))
        trainer = Trainer(cfg, tiny_llama(hidden_size=64, intermediate_size=128).cuda(), tiny_tokenizer(),
                          good_word_reward, seed=0)
        for _ in range(3):
            trainer.step(QUERIES)
        return torch.cuda.memory_allocated()

    if fails:  # out of memory after the update's forward pass, its activations alive in the frames
        forward = learner._pass_losses

        def out_of_memory(*args, **kwargs):
            losses = forward(*args, **kwargs)  # noqa: F841 - held by this frame, as an OOM's frames hold theirs
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

        monkeypatch.setattr(learner, "_pass_losses", out_of_memory)
    for _ in range(2):  # and the second run in the process starts where the first one did
        if fails:
            with pytest.raises(torch.OutOfMemoryError):
                release_memory_after(one_run)
        else:
            assert release_memory_after(one_run) > before
        torch.cuda.synchronize()
        left = torch.cuda.memory_allocated() - before
        assert left <= 1 << 20, f"{left / 2**20:.1f} MiB still allocated after the run"
