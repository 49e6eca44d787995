"""The experience's and update's passes under ppo.speed's settings give what the plain passes give: bit for bit where
the arithmetic is the same (last_hidden), within pinned tolerances where only float rounding differs (pad_shapes, an
update_batch_size below the mini-batch, compile), on the tiny GPT-2 and the tiny Llama (SmolLM2's architecture)."""

import dataclasses

import pytest
import torch

from cory.rl.agents import Agent, build_agents
from cory.rl.config import CORYConfig, PPOConfig, SpeedConfig, TrainConfig
from cory.rl.kernels import BodyAndHead
from cory.rl.learner import make_experience, ppo_update
from cory.rl.rollout import forward_response, pad_blocks
from cory.rl.trainer import Trainer
from cory.schema import ConfigError

from tiny import QUERIES, config, good_word_reward, padded_rollout, tiny_llama, tiny_lm, tiny_tokenizer

MODELS = {"gpt2": tiny_lm, "llama": tiny_llama}


def agent_and_reference(model: str, **speed):
    torch.manual_seed(0)
    cfg = TrainConfig(seed=0, ppo=PPOConfig(batch_size=8, mini_batch_size=4, learning_rate=1e-3, dropout="none",
                                            speed=SpeedConfig(**speed)), cory=CORYConfig(n_agents=1))
    (agent,), reference = build_agents(cfg, MODELS[model]())
    return agent, reference


def one_update(model: str, **speed):
    """An experience and one PPO update (2 epochs of 2 mini-batches) of a fresh agent on `padded_rollout`: the
    experience, the update's statistics and the weights after it."""
    agent, reference = agent_and_reference(model, **speed)
    agent.cfg = dataclasses.replace(agent.cfg, ppo_epochs=2)
    scores = torch.tensor([1.0, 0.0, -1.0, 0.5, 0.25, -0.5, 2.0, 0.3])
    exp = make_experience(agent, reference, padded_rollout(), scores)
    stats = ppo_update(agent, exp, torch.Generator().manual_seed(0))
    return exp, stats, [p.detach().clone() for p in agent.parameters()]


EXPERIENCE = ("logprobs", "values", "kl", "kl_penalty", "entropy", "rewards", "advantages", "returns")


@pytest.mark.parametrize("model", MODELS)
def test_the_body_and_head_apart_give_the_same_logits_values_and_updates_bit_for_bit(model):
    """ppo.speed.last_hidden: no output_hidden_states, no output-capturing hooks, the same numbers."""
    agent, _ = agent_and_reference(model)
    split = BodyAndHead(agent.lm.base_model, agent.lm.get_output_embeddings())
    rollout = padded_rollout()
    for train in (False, True):
        agent.train(train)
        plain = forward_response(agent.lm, rollout, agent.value_head)
        apart = forward_response(split, rollout, agent.value_head)
        assert all(torch.equal(a, b) for a, b in zip(plain, apart))
        assert forward_response(split, rollout)[1] is None
    runs = [one_update(model, last_hidden=on) for on in (False, True)]
    for name in EXPERIENCE:
        assert torch.equal(getattr(runs[0][0], name), getattr(runs[1][0], name)), name
    assert runs[0][1] == runs[1][1]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][2], runs[1][2]))


def test_a_trainer_with_the_body_and_head_apart_repeats_its_history():
    """Three CORY iterations on bf16 weights (sampling, a role exchange on the way): the same metrics bit for bit."""
    histories = []
    for on in (False, True):
        cfg = config(n_agents=2, dropout="none", role_exchange_period=2)
        speed = dataclasses.replace(cfg.ppo.speed, bf16_weights=True, last_hidden=on)
        torch.manual_seed(0)
        trainer = Trainer(dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, speed=speed)), tiny_lm(),
                          tiny_tokenizer(), good_word_reward, seed=0)
        assert isinstance(trainer.ref_lm, BodyAndHead) == on
        histories.append([{k: v for k, v in trainer.step(QUERIES).items() if not k.startswith("timing/")}
                          for _ in range(3)])
    assert histories[0] == histories[1]


def test_padding_the_blocks_masks_the_padding_and_keeps_the_positions():
    rollout = padded_rollout()
    padded = pad_blocks(rollout, 8)
    assert padded.prompt_ids.shape == (8, 8) and padded.response_ids.shape == (8, 8)
    assert torch.equal(padded.prompt_mask[:, 4:], rollout.prompt_mask) and not padded.prompt_mask[:, :4].any()
    assert torch.equal(padded.response_mask[:, :5], rollout.response_mask) and not padded.response_mask[:, 5:].any()
    assert padded.prompts == rollout.prompts and padded.responses == rollout.responses
    assert pad_blocks(padded, 4) is padded  # already a multiple


@pytest.mark.parametrize("model", MODELS)
def test_padded_shapes_give_the_same_experience_and_update_up_to_rounding(model):
    """ppo.speed.pad_shapes: the experience's per-token tensors at the real positions and 0 at the padding, the same
    statistics and weights, within float rounding (the padded passes sum and attend over more, masked, positions)."""
    (exp, stats, weights), (padded, padded_stats, padded_weights) = one_update(model), one_update(model, pad_shapes=8)
    T = exp.logprobs.shape[1]
    assert padded.logprobs.shape[1] == 8
    for name in EXPERIENCE:
        ours, theirs = getattr(padded, name), getattr(exp, name)
        if name != "logprobs":  # the log-probs of padding are not masked (nothing reads them there)
            assert not ours[:, T:].any(), name
        torch.testing.assert_close(ours[:, :T] * exp.mask, theirs * exp.mask, rtol=1e-5, atol=1e-6, msg=name)
    assert padded_stats == pytest.approx(stats, rel=1e-4, abs=1e-6)
    for a, b in zip(padded_weights, weights):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("rows", [1, 2])
def test_a_mini_batch_in_smaller_passes_takes_the_same_step(model, rows):
    """ppo.speed.update_batch_size below mini_batch_size: each pass adds its share of the mini-batch's loss; passes of
    one row meet rows without a response token (dropped samples), which add nothing."""
    keep = torch.tensor([True, True, False, True, True, True, False, True])

    def run(update_batch_size):
        agent, reference = agent_and_reference(model, update_batch_size=update_batch_size)
        agent.optimizer = torch.optim.SGD(agent.parameters(), lr=0.1)  # Adam would turn rounding near 0 into steps
        exp = make_experience(agent, reference, padded_rollout(), torch.linspace(-1, 1, 8), keep=keep)
        stats = ppo_update(agent, exp, torch.Generator().manual_seed(0))
        return stats, [p.detach().clone() for p in agent.parameters()], agent

    (stats, weights, _), (split, split_weights, agent) = run(None), run(rows)
    assert agent.cfg.split_minibatches and agent.cfg.update_pass_size == rows
    continuous = [k for k in stats if "clipfrac" not in k]
    assert {k: split[k] for k in continuous} == pytest.approx({k: stats[k] for k in continuous}, rel=1e-5, abs=1e-7)
    for k in ("policy_clipfrac", "value_clipfrac"):  # a token whose clipped and plain values tie up to rounding
        assert split[k] == pytest.approx(stats[k], abs=1 / 24 + 1e-6)
    for a, b in zip(split_weights, weights):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["skip", "trl"])
def test_a_split_mini_batch_over_the_ratio_threshold_is_skipped_as_a_whole(mode):
    """Its passes' gradients are dropped ("skip": Adam never steps) or zeroed ("trl": Adam steps on zeros), as for the
    mini-batch in one pass."""
    for update_batch_size in (None, 2):
        agent, reference = agent_and_reference("gpt2", update_batch_size=update_batch_size)
        agent.cfg = dataclasses.replace(agent.cfg, ratio_threshold=1e-3, ratio_threshold_mode=mode)
        before = [p.detach().clone() for p in agent.parameters()]
        exp = make_experience(agent, reference, padded_rollout(), torch.linspace(-1, 1, 8))
        stats = ppo_update(agent, exp, torch.Generator().manual_seed(0))
        assert stats["skipped_minibatches"] == 8.0  # 4 epochs x 2 mini-batches
        assert all(torch.equal(a, b) for a, b in zip(before, agent.parameters()))
        steps = {s["step"].item() for s in agent.optimizer.state.values()}
        assert steps == (set() if mode == "skip" else {8.0})


def test_a_split_mini_batch_with_a_non_finite_loss_is_never_stepped_on(monkeypatch):
    from cory.rl import learner
    from cory.rl.ppo import NonFiniteError

    real = learner._pass_losses

    def inf_loss(*args):
        losses, stats, checks = real(*args)
        return [loss * float("inf") for loss in losses], stats, checks

    monkeypatch.setattr(learner, "_pass_losses", inf_loss)
    for on_nonfinite in ("skip", "error"):
        agent, reference = agent_and_reference("gpt2", update_batch_size=2)
        agent.cfg = dataclasses.replace(agent.cfg, on_nonfinite=on_nonfinite)
        before = [p.detach().clone() for p in agent.parameters()]
        exp = make_experience(agent, reference, padded_rollout(), torch.linspace(-1, 1, 8))
        if on_nonfinite == "error":
            with pytest.raises(NonFiniteError, match="non-finite PPO loss .* epoch 0, mini-batch starting at 0"):
                ppo_update(agent, exp, torch.Generator().manual_seed(0))
            continue
        stats = ppo_update(agent, exp, torch.Generator().manual_seed(0))
        assert stats["skipped_minibatches"] == 8.0 and stats["policy_loss"] is None
        assert all(torch.equal(a, b) for a, b in zip(before, agent.parameters()))


def test_passes_below_a_mini_batch_need_one_mini_batch_per_step_and_last_hidden_a_plain_model():
    with pytest.raises(ConfigError, match=r"train\.ppo\.speed\.update_batch_size: below mini_batch_size = 4 needs "
                                          r"gradient_accumulation_steps 1"):
        PPOConfig(batch_size=16, mini_batch_size=4, gradient_accumulation_steps=2,
                  speed=SpeedConfig(update_batch_size=2))
    with pytest.raises(ConfigError, match=r"train\.ppo\.speed\.update_batch_size: must be a multiple of"):
        PPOConfig(batch_size=16, mini_batch_size=4, speed=SpeedConfig(update_batch_size=3))
    with pytest.raises(ConfigError, match=r"train\.ppo\.speed\.pad_shapes: must be > 0"):
        SpeedConfig(pad_shapes=0)
    with pytest.raises(ConfigError, match=r"train\.ppo\.speed\.last_hidden: splits a plain model"):
        TrainConfig(lora_rank=4, ppo=PPOConfig(speed=SpeedConfig(last_hidden=True)))


@pytest.mark.parametrize("compile,pad_shapes", [(True, 8), ("regional", None)], ids=["whole padded", "regional"])
def test_compiled_passes_of_the_body_have_no_graph_break_and_give_the_eager_update(compile, pad_shapes):
    """With the body and head apart (no output-capturing hooks) the tiny Llama's passes compile without a break (for
    each padded shape, or for dynamic ones) and give the eager experience and update up to rounding."""
    from benchmark.common import CompileCount

    torch._dynamo.reset()
    eager, eager_stats, eager_weights = one_update("llama", last_hidden=True)
    count = CompileCount()
    exp, stats, weights = one_update("llama", last_hidden=True, compile=compile, pad_shapes=pad_shapes)
    fields = count.fields()
    assert fields["compiled_graphs"] > 0 and fields["graph_breaks"] == 0, fields["graph_break_reasons"]
    T = eager.logprobs.shape[1]
    for name in ("logprobs", "values", "advantages"):
        torch.testing.assert_close(getattr(exp, name)[:, :T] * eager.mask, getattr(eager, name) * eager.mask,
                                   rtol=1e-4, atol=1e-5, msg=name)
    assert stats == pytest.approx(eager_stats, rel=1e-3, abs=1e-5)
    for a, b in zip(weights, eager_weights):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
