"""LoRA on a 4-bit NF4 base, as the paper's 7B runs: the settings it needs, the check before loading where bitsandbytes
or a GPU is missing, the dequantised base computing what bitsandbytes computes, and two adapters that train, save and
resume on it."""

import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM

from cory.rl.checkpoint import load_checkpoint, save_checkpoint
from cory.rl.config import PPOConfig, SpeedConfig, TrainConfig
from cory.rl.rollout import forward_response
from cory.rl.trainer import Trainer
from cory.schema import ConfigError

from lora_fixtures import base_weights, logits_of, lora_config_of, randomise_adapters, storages
from tiny import QUERIES, fixed_rollout, good_word_reward, tiny_tokenizer



def test_load_in_4bit_needs_lora():
    with pytest.raises(ConfigError, match=r"^train\.load_in_4bit: needs lora_rank"):
        TrainConfig(load_in_4bit=True)
    assert TrainConfig(load_in_4bit=True, lora_rank=16).load_in_4bit
    with pytest.raises(ConfigError, match=r"^train\.ppo\.speed\.dequantize_4bit: dequantises a 4-bit base only"):
        TrainConfig(lora_rank=16, ppo=PPOConfig(speed=SpeedConfig(dequantize_4bit=True)))


def test_load_in_4bit_without_bitsandbytes_or_a_gpu_stops_before_loading(monkeypatch):
    import importlib.util

    from cory.runs.run import load_lm

    if importlib.util.find_spec("bitsandbytes") is not None and torch.cuda.is_available():
        pytest.skip("bitsandbytes and a GPU are present: 4-bit loading can run here")
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("a model was loaded before the 4-bit check"))
    with pytest.raises(ConfigError, match=r"^train\.load_in_4bit: 4-bit NF4 loading .* is on, but "):
        load_lm("meta-llama/Llama-2-7b-chat-hf", "cpu", load_in_4bit=True)


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def tiny_nf4_llama(folder):
    """A factory of Trainers (seed, dequantize_4bit) on a tiny Llama saved in `folder`, loaded in NF4 as load_lm
    does, minus its GPU check (bitsandbytes 0.50 also runs on CPU), with two adapters and role exchange every 2."""
    from transformers import BitsAndBytesConfig

    from tiny import tiny_llama

    tiny_llama(hidden_size=64, intermediate_size=128, num_attention_heads=2).save_pretrained(folder)
    nf4 = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)

    def trainer(seed, dequantize_4bit=False):
        torch.manual_seed(seed)
        lm = AutoModelForCausalLM.from_pretrained(folder, quantization_config=nf4, device_map={"": DEVICE})
        for module in lm.modules():  # bitsandbytes 0.50 on a CPU with AVX512-BF16 repacks 4-bit weights at the
            if hasattr(module, "support_avx512bf16_for_cpu"):  # first eval-mode forward; no gradient flows after
                module.support_avx512bf16_for_cpu = False
        cfg = lora_config_of(role_exchange_period=2)
        cfg.load_in_4bit = True
        cfg.ppo.speed = dataclasses.replace(cfg.ppo.speed, dequantize_4bit=dequantize_4bit)
        return Trainer(cfg, lm, tiny_tokenizer(), good_word_reward)

    return trainer


def test_a_dequantized_4bit_base_computes_what_bitsandbytes_computes(tmp_path):
    """ppo.speed.dequantize_4bit: the layers run on bf16 copies of the dequantised NF4 weights; the logits and the
    adapters' gradients are bitsandbytes' own (up to float rounding on a GPU), the packed 4-bit weights (what a save
    merges) stay as they were, and a run with the option trains both adapters on the copies."""
    bnb = pytest.importorskip("bitsandbytes")
    from cory.rl.lora import dequantize_4bit_base

    trainer = tiny_nf4_llama(tmp_path / "base")
    run = trainer(0)
    randomise_adapters(run)
    agent = run.agents[0]
    rollout = fixed_rollout()
    rollout = dataclasses.replace(rollout, **{k: v.to(DEVICE) for k, v in vars(rollout).items() if torch.is_tensor(v)})

    def logits_and_gradients():
        agent.activate()
        agent.train(False)
        logits, values = forward_response(agent.forward_lm, rollout, agent.value_head)
        (logits.float().logsumexp(-1).mean() + values.float().mean()).backward()
        grads = [p.grad.clone() for p in agent.parameters()]
        agent.optimizer.zero_grad(set_to_none=True)
        return logits.detach().float(), grads

    packed = {n: p.detach().clone() for n, p in agent.lm.named_parameters() if type(p).__name__ == "Params4bit"}
    logits, grads = logits_and_gradients()
    held = dequantize_4bit_base(agent.lm)
    layers = [m for m in agent.lm.modules() if hasattr(m, "dense_weight")]
    assert len(layers) == 2 * 7 and held == sum(m.dense_weight.numel() * 2 for m in layers)  # 7 per block, bf16
    dense_logits, dense_grads = logits_and_gradients()
    if DEVICE == "cpu":  # bitsandbytes' CPU product is dequantise + linear: the same numbers
        assert torch.equal(dense_logits, logits) and all(map(torch.equal, dense_grads, grads))
    else:  # a GPU may take a fused kernel, with its own rounding
        torch.testing.assert_close(dense_logits, logits, rtol=2e-2, atol=2e-2)
        for dense, grad in zip(dense_grads, grads):
            torch.testing.assert_close(dense, grad, rtol=5e-2, atol=1e-3)
    assert all(torch.equal(p, packed[n]) for n, p in agent.lm.named_parameters() if n in packed)
    assert "dense_weight" not in " ".join(agent.lm.state_dict())

    # the option builds the copies for a run, whose iterations then sample, score and step both adapters on them
    # (whole iterations are not compared: a float difference flips a draw of the tiny model's sampler)
    run = trainer(0, dequantize_4bit=True)
    layers = [m for m in run.agents[0].lm.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(layers) == 14 and all(hasattr(m, "dense_weight") for m in layers)
    before = [p.detach().clone() for agent in run.agents for p in agent.lm_weights().values()]
    for _ in range(2):
        metrics = run.step(QUERIES)
    assert metrics["llm1/kl"] > 0 and metrics["llm2/kl"] > 0
    after = [p for agent in run.agents for p in agent.lm_weights().values()]
    assert all(not torch.equal(a, b) for a, b in zip(before, after))


def test_a_4bit_base_trains_saves_and_resumes_per_adapter(tmp_path):
    """The paper's setting end to end on a tiny Llama: an NF4 base, two adapters, role exchange, an adapter-only
    checkpoint, and a saved folder that is a plain dequantised model. Runs where bitsandbytes is installed (not in
    CI)."""
    pytest.importorskip("bitsandbytes")
    trainer = tiny_nf4_llama(tmp_path / "base")

    run = trainer(0)
    shared = run.agents[0].lm
    assert shared.is_loaded_in_4bit and all(a.lm is shared for a in run.agents)
    packed = storages(p for n, p in shared.named_parameters() if type(p).__name__ == "Params4bit")
    assert packed and packed <= storages(base_weights(shared))
    for _ in range(2):
        run.step(QUERIES)
    save_checkpoint(tmp_path / "resume", run, {})
    expected = run.step(QUERIES)
    assert expected["llm1/role"] == 1.0 and expected["llm1/kl"] > 0 and expected["llm2/kl"] > 0
    assert packed == storages(p for n, p in shared.named_parameters() if type(p).__name__ == "Params4bit")

    resumed = trainer(5)
    load_checkpoint(tmp_path / "resume", resumed)
    got = resumed.step(QUERIES)
    numbers = [k for k in expected if not k.startswith("timing/")]
    assert {k: got[k] for k in numbers} == pytest.approx({k: expected[k] for k in numbers}, rel=1e-5, abs=1e-6)

    randomise_adapters(run)
    rollout = fixed_rollout()
    rollout = dataclasses.replace(rollout, **{k: v.to(DEVICE) for k, v in vars(rollout).items() if torch.is_tensor(v)})
    adapted = [logits_of(agent, rollout).float() for agent in run.agents]
    with torch.no_grad():
        reference = forward_response(run.ref_lm, rollout)[0]
    run.agents[0].save(tmp_path / "llm1")
    assert torch.equal(logits_of(run.agents[1], rollout), adapted[1].to(reference.dtype))
    with torch.no_grad():
        assert torch.equal(forward_response(run.ref_lm, rollout)[0], reference)
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "llm1").to(DEVICE)
    assert type(plain).__name__ == "LlamaForCausalLM" and not hasattr(plain.config, "quantization_config")
    assert not any(type(p).__name__ == "Params4bit" for p in plain.parameters())
    with torch.no_grad():
        saved = forward_response(plain, rollout)[0].float()
    # the adapted model computes in bf16 (bnb_4bit_compute_dtype), the saved one in fp32
    assert (saved - adapted[0]).abs().max() < 0.02 < (saved - adapted[1]).abs().max()
