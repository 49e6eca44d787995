"""CORY with LoRA as the paper's 7B runs need it: two adapters (LLM1, LLM2) on ONE frozen base, the reference being
that base with the adapters off. The tests count the base's weight storages (a copy anywhere fails them), check that
the shared base computes exactly what separate per-agent copies computed, and that role exchange, checkpoints and
saved models keep each agent's adapter apart."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2LMHeadModel

from cory.rl.agents import Agent, frozen_reference
from cory.rl.lora import AdaptersDisabled, lora_config
from cory.rl.checkpoint import load_checkpoint, save_checkpoint
from cory.rl.config import PPOConfig, SpeedConfig, TrainConfig
from cory.schema import ConfigError
from cory.rl.learner import make_experience, ppo_update
from cory.rl.rollout import forward_response, generate
from cory.rl.trainer import Trainer

from lora_fixtures import (base_weights, logits_of, lora_config_of, lora_trainer, randomise_adapters,
                           storages)
from run_fixtures import history, job, killed_on_step, task  # noqa: F401 (task: the tiny model and prompt file, a fixture)
from tiny import QUERIES, config, fixed_rollout, good_word_reward, tiny_lm, tiny_tokenizer

pytestmark = pytest.mark.filterwarnings("ignore:fan_in_fan_out is set to False")  # GPT-2's Conv1D, peft's notice


# ------------------------------------------------------------------------------------------------------------------
# One copy of the base


@pytest.mark.parametrize("n_agents", [1, 2])
def test_lora_agents_and_reference_share_one_copy_of_the_base(monkeypatch, n_agents):
    monkeypatch.setattr(GPT2LMHeadModel, "__deepcopy__", lambda self, memo: pytest.fail("the base was deep-copied"),
                        raising=False)
    torch.manual_seed(0)
    lm = tiny_lm()
    before = storages(list(lm.parameters()) + list(lm.buffers()))
    trainer = Trainer(lora_config_of(n_agents), lm, tiny_tokenizer(), good_word_reward)
    assert isinstance(trainer.ref_lm, AdaptersDisabled) and trainer.ref_lm.model is trainer.agents[0].lm
    assert all(agent.lm is trainer.agents[0].lm for agent in trainer.agents)
    after = storages(w for agent in trainer.agents for w in base_weights(agent.lm))
    assert after == before  # the base's own tensors, and no others
    adapters = [storages(agent.lm_weights().values()) for agent in trainer.agents]
    assert all(a.isdisjoint(before) for a in adapters) and len(set.union(*adapters)) == sum(map(len, adapters))
    assert sorted(trainer.agents[0].lm.peft_config) == [a.name for a in trainer.agents]  # one adapter per agent


def test_full_fine_tuning_still_holds_three_copies_which_the_count_detects():
    """The counting method above sees copies: full-fine-tuning CORY holds LLM1, LLM2 and the reference."""
    torch.manual_seed(0)
    lm = tiny_lm()
    before = storages(lm.parameters())
    trainer = Trainer(config(n_agents=2), lm, tiny_tokenizer(), good_word_reward)
    models = [a.lm for a in trainer.agents] + [trainer.ref_lm]
    found = [storages(m.parameters()) for m in models]
    assert found[0] == before and found[1].isdisjoint(before) and found[2].isdisjoint(before | found[1])


# ------------------------------------------------------------------------------------------------------------------
# The same numbers as separate copies


def separate_copies(cfg: TrainConfig, lm):
    """The LoRA path before the shared base: a deep-copied frozen reference, a deep copy of the model for LLM2, and
    each copy wrapped by peft on its own (one "default" adapter each)."""
    from peft import get_peft_model

    reference = frozen_reference(lm)
    copies = [lm] + [copy.deepcopy(lm) for _ in range(cfg.cory.n_agents - 1)]
    copies = [get_peft_model(c, lora_config(cfg.lora_rank, cfg.lora_alpha)) for c in copies]
    return [Agent(f"llm{i + 1}", c, cfg.ppo) for i, c in enumerate(copies)], reference


def adapter_tensors(agent: Agent) -> list[torch.Tensor]:
    """The agent's adapter weights in layer order (names differ: "default" in a copy, "llm<k>" on the shared base)."""
    return [p.detach().clone() for p in agent.lm_weights().values()]


@pytest.mark.parametrize("n_agents", [1, 2])
def test_shared_base_gives_the_same_steps_as_separate_copies(monkeypatch, n_agents):
    """Three seeded iterations (a role exchange after the second) with the same seed: the same metrics, adapter
    weights and value heads. Same seed, same RNG draws: the adapters are initialised in the same order."""
    import cory.rl.trainer

    runs = {}
    for path in ("shared", "copies"):
        if path == "copies":
            monkeypatch.setattr(cory.rl.trainer, "build_agents", separate_copies)
        trainer = lora_trainer(n_agents, role_exchange_period=2)
        initial = [adapter_tensors(a) for a in trainer.agents]
        history = [trainer.step(QUERIES) for _ in range(3)]
        runs[path] = (trainer, initial, history)
    (shared, init_s, hist_s), (copies, init_c, hist_c) = runs["shared"], runs["copies"]
    assert isinstance(copies.ref_lm, GPT2LMHeadModel)  # the old path did run
    for a, b in zip(init_s, init_c):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    for ms, mc in zip(hist_s, hist_c):
        numbers = [k for k in ms if not k.startswith("timing/")]
        assert set(numbers) == {k for k in mc if not k.startswith("timing/")}
        assert {k: ms[k] for k in numbers} == pytest.approx({k: mc[k] for k in numbers}, rel=0, abs=0)
    assert hist_s[-1]["llm1/role"] == float(n_agents == 2)  # CORY's exchange happened
    for agent_s, agent_c, initial in zip(shared.agents, copies.agents, init_s):
        trained = adapter_tensors(agent_s)
        assert any(not torch.equal(x, y) for x, y in zip(trained, initial))
        for x, y in zip(trained, adapter_tensors(agent_c)):
            assert torch.equal(x, y)
        for x, y in zip(agent_s.value_head.parameters(), agent_c.value_head.parameters()):
            assert torch.equal(x, y)


# ------------------------------------------------------------------------------------------------------------------
# Each agent its adapter


def test_reference_is_the_base_with_the_adapters_off():
    trainer = lora_trainer()
    randomise_adapters(trainer)
    rollout = fixed_rollout()
    pristine = tiny_lm()  # the same seed: the base's initial weights
    with torch.no_grad():
        expected = forward_response(pristine, rollout)[0]
        reference = forward_response(trainer.ref_lm, rollout)[0]
    assert torch.equal(reference, expected)
    for agent in trainer.agents:
        assert not torch.allclose(logits_of(agent, rollout), expected)
    assert trainer.agents[0].lm.active_adapter == "llm2"  # the reference pass changed no adapter choice
    assert all(p.requires_grad for p in trainer.agents[1].lm_weights().values())


def test_an_update_moves_only_the_agents_adapter_and_value_head():
    trainer = lora_trainer()
    llm1, llm2 = trainer.agents
    optimised = [{id(p) for g in a.optimizer.param_groups for p in g["params"]} for a in trainer.agents]
    for agent, ids in zip(trainer.agents, optimised):
        assert ids == {id(p) for p in list(agent.lm_weights().values()) + list(agent.value_head.parameters())}
    assert optimised[0].isdisjoint(optimised[1])

    base = [t.clone() for t in base_weights(llm1.lm)]
    other = adapter_tensors(llm2)
    llm2.activate()  # the wrong adapter active: the learner must switch to llm1's itself
    rollout = generate(llm1.lm, trainer.tokenizer, QUERIES, llm1.cfg.generation, 4)
    ppo_update(llm1, make_experience(llm1, trainer.ref_lm, rollout, good_word_reward(None, rollout.responses)))
    assert all(torch.equal(a, b) for a, b in zip(base, base_weights(llm1.lm)))
    assert all(torch.equal(a, b) for a, b in zip(other, adapter_tensors(llm2)))
    assert llm1.optimizer.state and not llm2.optimizer.state
    assert all(p.grad is None for p in llm2.parameters())


def test_role_exchange_swaps_adapters_with_their_optimizers(monkeypatch):
    import cory.rl.trainer

    used = []
    real_generate = cory.rl.trainer.generate

    def recording_generate(model, *args, **kwargs):
        used.append(model.active_adapter)
        return real_generate(model, *args, **kwargs)

    monkeypatch.setattr(cory.rl.trainer, "generate", recording_generate)
    trainer = lora_trainer(role_exchange_period=1)
    llm1, llm2 = trainer.agents
    optimizers = (llm1.optimizer, llm2.optimizer)
    trainer.step(QUERIES)
    assert trainer.roles.pioneer is llm2 and (llm1.adapter, llm2.adapter) == ("llm1", "llm2")
    trainer.step(QUERIES)
    assert used == ["llm1", "llm2", "llm2", "llm1"]  # pioneer then observer, before and after the exchange
    assert (llm1.optimizer, llm2.optimizer) == optimizers
    for agent in trainer.agents:  # each Adam holds moments for its own adapter, 2 iterations x 4 epochs x 2 steps
        own = {id(p) for p in agent.parameters()}
        assert {id(p) for p in agent.optimizer.state} == own
        assert all(s["step"] == 16 for s in agent.optimizer.state.values())


# ------------------------------------------------------------------------------------------------------------------
# Saving and resuming per adapter


def test_save_writes_base_plus_one_adapter_and_leaves_the_shared_model_alone(tmp_path):
    trainer = lora_trainer()
    randomise_adapters(trainer)
    llm1, llm2 = trainer.agents
    rollout = fixed_rollout()
    adapted = [logits_of(agent, rollout) for agent in trainer.agents]
    with torch.no_grad():
        reference = forward_response(trainer.ref_lm, rollout)[0]
    llm1.save(tmp_path / "llm1", trainer.tokenizer)
    llm2.save(tmp_path / "llm2")
    assert torch.equal(logits_of(llm2, rollout), adapted[1])
    assert torch.equal(logits_of(llm1, rollout), adapted[0])
    with torch.no_grad():
        assert torch.equal(forward_response(trainer.ref_lm, rollout)[0], reference)
    for name, expected in zip(("llm1", "llm2"), adapted):
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path / name)
        assert type(loaded) is GPT2LMHeadModel and set(loaded.state_dict()) == set(tiny_lm().state_dict())
        with torch.no_grad():
            torch.testing.assert_close(forward_response(loaded, rollout)[0], expected, rtol=1e-5, atol=1e-5)


def test_a_lora_run_resumes_from_its_adapter_only_checkpoint(tmp_path):
    """Kill after iteration 1, resume in a fresh trainer (its base rebuilt, its adapters loaded): iteration 2 is the
    uninterrupted run's. The checkpoint holds adapters, not the base."""
    uninterrupted = lora_trainer(role_exchange_period=1)
    for _ in range(2):
        uninterrupted.step(QUERIES)
    save_checkpoint(tmp_path, uninterrupted, {})
    expected = uninterrupted.step(QUERIES)

    resumed = lora_trainer(role_exchange_period=1, seed=5)  # other adapters, overwritten by the checkpoint
    load_checkpoint(tmp_path, resumed)
    assert resumed.iteration == 2 and resumed.roles.pioneer is resumed.agents[0]
    got = resumed.step(QUERIES)
    numbers = [k for k in expected if not k.startswith("timing/")]
    assert {k: got[k] for k in numbers} == pytest.approx({k: expected[k] for k in numbers}, rel=1e-6, abs=1e-8)
    for a, b in zip(uninterrupted.agents, resumed.agents):
        assert all(torch.equal(x, y) for x, y in zip(adapter_tensors(a), adapter_tensors(b)))

    from safetensors.torch import load_file

    saved = load_file(str(next(tmp_path.glob("it*")) / "llm2.safetensors"))
    assert saved and all(".lora_" in k and ".llm2." in k for k in saved)


def test_a_killed_lora_cory_run_resumes_to_the_uninterrupted_history(task, tmp_path, monkeypatch):
    """run_training end to end, as tests/test_resume.py does for full fine-tuning: killed in iteration 5, resumed from
    the adapter-only checkpoint after iteration 3, it ends with the uninterrupted run's history and saved models."""
    from cory.runs.run import run_training

    torch.set_num_threads(1)

    def lora_job(where):
        run = job(task, where, n_agents=2)
        run.train.lora_rank, run.train.lora_alpha = 4, 8.0
        return run

    run_training(lora_job(tmp_path / "whole"), "cpu", checkpoint_every=2)
    with killed_on_step(monkeypatch, 6):
        run_training(lora_job(tmp_path / "killed"), "cpu", checkpoint_every=2)
    checkpoint = next((tmp_path / "killed/ckpt/resume").glob("it*"))
    assert sum(f.stat().st_size for f in checkpoint.glob("llm*.safetensors")) < 0.1 * (
        tmp_path / "whole/ckpt/llm1/model.safetensors").stat().st_size  # adapters and value heads, no base
    assert run_training(lora_job(tmp_path / "killed"), "cpu", checkpoint_every=2)["resumed_after"] == 3
    assert history(tmp_path / "killed/run") == history(tmp_path / "whole/run")
    for agent in ["llm1", "llm2"]:
        saved = (tmp_path / f"whole/ckpt/{agent}/model.safetensors").read_bytes()
        assert (tmp_path / f"killed/ckpt/{agent}/model.safetensors").read_bytes() == saved
    assert (tmp_path / "whole/ckpt/llm1/model.safetensors").read_bytes() != saved  # two different merged models


def test_compile_is_for_full_fine_tuning():
    with pytest.raises(ConfigError, match=r"^train\.ppo\.speed\.compile: compiles full fine-tuning only"):
        TrainConfig(lora_rank=16, ppo=PPOConfig(speed=SpeedConfig(compile=True)))


def test_the_compiled_decoding_step_follows_the_active_adapter():
    """`ppo.generation.cache: graph` on the shared LoRA model: one decoder serves both agents (it is kept per model and
    shape), and its compiled step (inductor on the CPU, a CUDA graph on a GPU) samples with whichever adapter is active,
    call after call, exactly what `generate` samples with it."""
    from cory.rl.config import GenerationConfig
    from cory.rl.decoding import decoder_for

    trainer = lora_trainer()
    randomise_adapters(trainer)
    tok, lm = tiny_tokenizer(), trainer.agents[0].lm
    lm.eval()
    prompts = ["the movie", "a film was", "good plot", "not"]
    enc = tok(prompts, return_tensors="pt", padding=True)
    gen = GenerationConfig(cache="graph", repetition_penalty=1.0)
    order = [0, 1, 0, 1]  # the agents by turns, as pioneer and observer
    torch.manual_seed(0)
    expected = []
    for i in order:
        trainer.agents[i].activate()
        expected.append(generate(lm, tok, prompts, GenerationConfig(repetition_penalty=1.0), 7).response_ids.tolist())
    assert expected[0] != expected[1]  # the two adapters sample differently: the check below can tell them apart
    torch.manual_seed(0)
    sampled = []
    for i in order:
        trainer.agents[i].activate()
        decoder = decoder_for(lm, len(prompts), 64, gen, tok.pad_token_id, tok.eos_token_id, compile_step=True)
        sampled.append(decoder.sample(enc.input_ids, enc.attention_mask, 7, 0, check_every=1).tolist())
    assert sampled == expected
    assert len(lm._cory_graph_decoders) == 1
