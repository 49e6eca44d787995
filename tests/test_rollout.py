"""Generation masks and padding: a left-padded batch gives the same per-token outputs as each sequence alone."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from cory.rl.agents import ValueHead
from cory.rl.config import GenerationConfig
from cory.rl.decoding import position_ids
from cory.rl.kernels import fuse_gelu
from cory.rl.rollout import Rollout, decode_responses, forward_response, generate, mask_after_eos

from tiny import WORDS, tiny_lm, tiny_tokenizer


def test_mask_after_eos_keeps_the_first_eos():
    ids = torch.tensor([[5, 0, 9, 0], [0, 7, 7, 7], [1, 1, 1, 1]])
    assert mask_after_eos(ids, eos_token_id=0).tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]]


def test_position_ids_start_at_first_real_token():
    assert position_ids(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]]


def test_decode_drops_eos_and_padding():
    tok = tiny_tokenizer()
    ids = torch.tensor([[4, 5, 0, 0], [2, 2, 2, 2]])
    assert decode_responses(tok, ids, mask_after_eos(ids, 0)) == ["the movie", "good good good good"]


def left_padded_rollout() -> Rollout:
    """Two rows: a prompt left-padded by 2, and a response that ends with EOS (0) before the batch's last column."""
    prompt = torch.tensor([[0, 0, 4, 5], [6, 7, 8, 9]])
    prompt_mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    response = torch.tensor([[2, 3, 0], [3, 2, 2]])
    return Rollout(prompt, prompt_mask, response, mask_after_eos(response, 0), ["", ""], ["", ""])


def test_forward_on_padded_batch_equals_forward_on_each_trimmed_sequence():
    lm, head = tiny_lm(), ValueHead(32, dropout=0.0)
    rollout = left_padded_rollout()
    logits, values = forward_response(lm, rollout, head)
    for i, start in enumerate([2, 0]):
        alone = Rollout(rollout.prompt_ids[i : i + 1, start:], rollout.prompt_mask[i : i + 1, start:],
                        rollout.response_ids[i : i + 1], rollout.response_mask[i : i + 1], [""], [""])
        logits_i, values_i = forward_response(lm, alone, head)
        assert torch.allclose(logits[i], logits_i[0], atol=1e-5)
        assert torch.allclose(values[i], values_i[0], atol=1e-5)


def test_generate_shapes_masks_and_texts():
    torch.manual_seed(0)
    lm, tok = tiny_lm(), tiny_tokenizer()
    gen = GenerationConfig(response_length=(5, 5), repetition_penalty=1.0)
    rollout = generate(lm, tok, ["the movie", "good", "the film was very"], gen, max_new_tokens=5)
    assert rollout.prompt_ids.shape == (3, 4) and rollout.prompt_mask.sum(1).tolist() == [2, 1, 4]
    assert rollout.response_ids.shape[0] == 3 and rollout.response_ids.shape[1] <= 5
    for ids, mask, text in zip(rollout.response_ids, rollout.response_mask, rollout.responses):
        n = int(mask.sum())
        kept = ids[:n].tolist()
        assert 0 not in kept[:-1]  # no EOS before the last kept token
        words = [WORDS[i] for i in kept if i != 0]
        assert text.split() == words
    # chunked generation gives the same layout as one batch
    chunked = generate(lm, tok, ["the movie", "good", "the film was very"], gen, 5, batch_size=2)
    assert chunked.prompt_ids.tolist() == rollout.prompt_ids.tolist()


def test_a_prompt_too_long_for_the_positions_keeps_its_last_tokens():
    torch.manual_seed(0)
    lm, tok = tiny_lm(), tiny_tokenizer()  # 64 positions
    gen = GenerationConfig(response_length=(5, 5), repetition_penalty=1.0)
    long = " ".join(["the movie was very good"] * 14)  # 70 tokens
    with pytest.warns(RuntimeWarning, match="too few of the model's 64 positions"):
        rollout = generate(lm, tok, [long, "good"], gen, max_new_tokens=5)
    assert rollout.prompt_ids.shape[1] == 64 - 5 and rollout.response_ids.shape[1] == 5
    assert rollout.prompt_ids[0].tolist() == tok(long).input_ids[-59:]  # the end of the prompt, where the cue is
    assert rollout.prompt_mask[1].sum() == 1  # the short prompt is whole
    with pytest.raises(ValueError, match="64 new tokens do not fit the model's 64 positions"):
        generate(lm, tok, ["good"], gen, max_new_tokens=64)


def test_a_static_cache_samples_what_the_dynamic_one_does_and_is_kept_between_calls():
    lm, tok = tiny_lm(), tiny_tokenizer()
    prompts = ["the movie", "good", "the film was very", "a plot"] * 3
    rollouts = {}
    for cache in ("dynamic", "static", "static"):  # the second static call reuses (and resets) the first's cache
        torch.manual_seed(0)
        gen = GenerationConfig(response_length=(7, 7), repetition_penalty=1.1, cache=cache)
        rollouts.setdefault(cache, []).append(generate(lm, tok, prompts, gen, max_new_tokens=7))
    dynamic = rollouts["dynamic"][0]
    for static in rollouts["static"]:
        assert static.response_ids.tolist() == dynamic.response_ids.tolist()
        assert static.responses == dynamic.responses
    assert [key[:2] for key in lm._cory_static_caches] == [(len(prompts), 64)]  # prompt 4 + 7 tokens, rounded up to 64
    assert "_cory_static_caches" not in dict(lm.named_modules()) and not any("static" in k for k in lm.state_dict())


def test_the_compiled_decoding_step_of_a_static_cache_samples_what_the_dynamic_cache_does(monkeypatch):
    """On a GPU, transformers compiles the decoding step of a static-cache `generate` (CUDA graphs); here the same
    compilation is forced on the CPU (inductor's default mode): left-padded prompts give the same tokens as the
    dynamic cache, in a first call and in a second one that reuses the reset cache with other prompts."""
    from transformers import CompileConfig, GenerationMixin

    compile_config = CompileConfig(fullgraph=True, mode="default", dynamic=False)
    compile_config._compile_all_devices = True  # transformers' switch to compile on a CPU (for tests)
    real_generate = GenerationMixin.generate
    monkeypatch.setattr(GenerationMixin, "generate",
                        lambda self, *a, **kw: real_generate(self, *a, compile_config=compile_config, **kw))
    from torch._dynamo.utils import counters

    counters.clear()
    lm, tok = tiny_lm(), tiny_tokenizer()
    for prompts in (["the movie", "a", "the film was very good and", "not"], ["good", "the plot was not very good",
                                                                               "a film", "bad"]):
        samples = {}
        for cache in ("dynamic", "static"):
            torch.manual_seed(0)
            gen = GenerationConfig(response_length=(9, 9), repetition_penalty=1.1, cache=cache)
            samples[cache] = generate(lm, tok, prompts * 2, gen, max_new_tokens=9).response_ids.tolist()
        assert samples["static"] == samples["dynamic"]
    assert [key[:2] for key in lm._cory_static_caches] == [(8, 64)]
    assert counters["stats"]["unique_graphs"] >= 1  # the decoding step did run compiled


def test_generation_cache_must_be_dynamic_or_static():
    import pytest

    from cory.schema import ConfigError

    with pytest.raises(ConfigError, match="cache"):
        GenerationConfig(cache="paged")


def test_suppress_eos_gives_every_response_the_drawn_length():
    torch.manual_seed(0)
    lm, tok = tiny_lm(), tiny_tokenizer()
    with torch.no_grad():  # make EOS (id 0) by far the likeliest token
        lm.lm_head.weight[0] += 50 * lm.transformer.wte.weight.std()
        lm.transformer.wte.weight[0] = lm.lm_head.weight[0]
    prompts = ["the movie", "good", "a plot"] * 4
    free = generate(lm, tok, prompts, GenerationConfig(response_length=(6, 6)), max_new_tokens=6)
    assert free.response_lengths.float().mean() < 6
    forced = generate(lm, tok, prompts, GenerationConfig(response_length=(6, 6), suppress_eos=True), max_new_tokens=6)
    assert forced.response_lengths.tolist() == [6] * len(prompts)
    assert 0 not in forced.response_ids.tolist()[0]


def test_rl_on_a_gpu_turns_cudnn_attention_off_and_on_cpu_leaves_it(monkeypatch):
    from cory.rl import kernels

    calls = []
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", lambda enabled: calls.append(("cudnn", enabled)))
    monkeypatch.setattr(torch, "set_float32_matmul_precision", lambda level: calls.append(("fp32", level)))
    kernels.configure_gpu_for_rl("cpu")
    assert calls == []
    kernels.configure_gpu_for_rl("cuda:0")
    assert calls == [("cudnn", False), ("fp32", "high")]


def test_an_aligned_lm_head_gives_the_same_logits_and_gradients_and_keeps_the_weights():
    """ppo.speed.align_head: the output layer runs on its weight padded to 64 rows; logits, gradients, the tied weight and
    the state dict are those of the plain layer."""
    import copy

    from cory.rl.kernels import AlignedLMHead, align_lm_head

    plain = tiny_lm()  # 14-token vocabulary: padded to 64
    aligned = copy.deepcopy(plain)
    assert align_lm_head(aligned) and isinstance(aligned.lm_head, AlignedLMHead)
    assert aligned.lm_head.weight is aligned.transformer.wte.weight  # still tied
    assert aligned.state_dict().keys() == plain.state_dict().keys()
    ids = torch.randint(0, 14, (3, 5), generator=torch.Generator().manual_seed(0))
    outputs = []
    for lm in (plain, aligned):
        logits = lm(input_ids=ids).logits
        assert logits.shape == (3, 5, 14)
        logits.log_softmax(-1)[..., 2].sum().backward()
        outputs.append((logits, lm.transformer.wte.weight.grad, lm.transformer.h[0].attn.c_attn.weight.grad))
    for a, b in zip(*outputs):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)
    assert not align_lm_head(aligned)  # once is enough
    assert align_lm_head(copy.deepcopy(aligned)) is False and isinstance(copy.deepcopy(aligned).lm_head, AlignedLMHead)


def test_an_aligned_lm_head_multiplies_a_contiguous_copy_of_a_strided_input(monkeypatch):
    """The prompt pass keeps one position's logits (logits_to_keep=1), a strided slice of the hidden states: the
    aligned head hands cuBLAS a contiguous copy of it, and the logits are those of the plain layer."""
    import copy

    from cory.rl import kernels

    plain = tiny_lm()
    aligned = copy.deepcopy(plain)
    kernels.align_lm_head(aligned)
    seen, linear = [], torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda x, *rest: seen.append(x.is_contiguous()) or linear(x, *rest))
    ids = torch.randint(0, 14, (3, 5), generator=torch.Generator().manual_seed(0))
    logits = [lm(input_ids=ids, logits_to_keep=1).logits for lm in (plain, aligned)]
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-6, atol=1e-6)
    assert seen[-1] is True and False in seen  # the plain head's last call had the strided slice; the aligned head's not


def test_align_lm_head_leaves_a_vocabulary_of_64_multiple_alone():
    from cory.rl.kernels import align_lm_head

    lm = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=128))
    assert not align_lm_head(lm) and type(lm.lm_head) is torch.nn.Linear


def test_fuse_gelu_gives_gpt2s_gelu_new_as_one_kernel_with_the_same_outputs_and_gradients():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=3, n_embd=32, n_head=2, n_positions=64, vocab_size=50, activation_function="gelu_new")
    written_out, fused = GPT2LMHeadModel(config).eval(), GPT2LMHeadModel(config).eval()
    fused.load_state_dict(written_out.state_dict())
    assert fuse_gelu(fused) == 3 and fuse_gelu(fused) == 0  # one per block, then none left
    assert fused.config.activation_function == "gelu_new"  # a saved model loads as before
    ids = torch.randint(0, 50, (2, 12))
    a, b = written_out(ids).logits, fused(ids).logits
    assert torch.allclose(a, b, atol=1e-5)
    a.square().mean().backward()
    b.square().mean().backward()
    for (name, p), q in zip(written_out.named_parameters(), fused.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5), name
