"""cory.rl.decoding: the whole decoding step as one compiled step samples exactly what transformers' `generate` samples."""

import pytest
import torch
import transformers
from packaging.version import Version

from cory.rl.config import GenerationConfig
from cory.rl.decoding import cache_shapes
from cory.rl.rollout import generate

from tiny import tiny_llama, tiny_lm, tiny_tokenizer

# transformers < 5.23 penalised the prompt's left padding (the pad token) in `generate`; cory.rl.decoding leaves it out, as
# `generate` does since: there the two agree only without a repetition penalty.
PADDING_PENALISED = Version(transformers.__version__) < Version("5.23")
PENALTY = 1.0 if PADDING_PENALISED else 1.1

PROMPTS = ["the movie", "a", "the film was very good and", "not", "good plot", "the"]


def eos_prone_lm(strength: float):
    """The tiny model with EOS (id 0) made likelier, so that rows end early (and at different steps): the final layer
    norm's bias adds about `strength` to EOS's logit."""
    lm = tiny_lm()
    with torch.no_grad():
        eos = lm.lm_head.weight[0]
        lm.transformer.ln_f.bias += strength * eos / eos.norm() ** 2
    return lm


def samples(lm, gen: GenerationConfig, max_new_tokens: int, calls: int = 3, prompts=PROMPTS) -> list:
    """Responses of `calls` consecutive calls from one seed (the later calls see the random state the earlier left)."""
    torch.manual_seed(0)
    rollouts = [generate(lm, tiny_tokenizer(), prompts, gen, max_new_tokens) for _ in range(calls)]
    return [(r.response_ids.tolist(), r.response_mask.tolist(), r.responses) for r in rollouts]


SETTINGS = {
    "the profile's (penalty 1.1)": dict(repetition_penalty=1.1),
    "no EOS (suppress_eos)": dict(repetition_penalty=1.1, suppress_eos=True),
    "temperature, top-k, top-p": dict(repetition_penalty=1.2, temperature=0.7, top_k=5, top_p=0.9),
    "no penalty, do not stop at EOS": dict(repetition_penalty=1.0, stop_at_eos=False),
}


@pytest.mark.parametrize("strength", [0.0, 2.0], ids=["rows run to the end", "rows end early"])
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_graph_decoding_samples_what_generate_samples(setting, strength):
    kwargs = SETTINGS[setting]
    if PADDING_PENALISED and kwargs["repetition_penalty"] != 1.0:
        pytest.skip(f"transformers {transformers.__version__} penalises the prompt's padding; cory.rl.decoding does not")
    lm = eos_prone_lm(strength)
    dynamic = samples(lm, GenerationConfig(cache="dynamic", **kwargs), max_new_tokens=11)
    graph = samples(lm, GenerationConfig(cache="graph", **kwargs), max_new_tokens=11)
    assert graph == dynamic
    if strength and "suppress_eos" not in kwargs and kwargs.get("stop_at_eos", True):
        widths = {len(ids[0]) for ids, _, _ in dynamic}
        assert widths != {11}  # the early end was exercised: every row finished before the last step


def test_the_decoder_is_kept_per_batch_and_cache_length_and_reused_across_prompt_widths():
    lm, tok = tiny_lm(), tiny_tokenizer()
    gen = GenerationConfig(cache="graph")
    for prompts, max_new in ((PROMPTS, 5), (["good"] * 6, 9), (PROMPTS[:3], 5)):
        generate(lm, tok, prompts, gen, max_new)
    lengths = sorted((key[0], key[1]) for key in lm._cory_graph_decoders)
    assert lengths == [(3, 64), (6, 64)]  # prompt + response rounded up to 64; the model has 64 positions
    assert "_cory_graph_decoders" not in dict(lm.named_modules()) and not any("decod" in k for k in lm.state_dict())


def test_a_kept_decoder_with_a_longer_cache_is_reused_and_samples_the_same():
    """generation.cache_length makes the cache longer than prompt + response need; the extra positions are masked out,
    so the tokens are those of the shortest cache, and a later call that needs less reuses the longer decoder."""
    short = GenerationConfig(cache="graph", repetition_penalty=PENALTY)
    long = GenerationConfig(cache="graph", repetition_penalty=PENALTY, cache_length=192)
    lm, other = tiny_lm(n_positions=256), tiny_lm(n_positions=256)
    assert samples(lm, long, 11) == samples(other, short, 11)
    assert cache_shapes(lm) == [[6, 192]] and cache_shapes(other) == [[6, 64]]
    assert samples(lm, short, 11) == samples(other, short, 11)  # needs 64: the kept 192 one serves
    assert cache_shapes(lm) == [[6, 192]]
    lm = tiny_lm()
    samples(lm, long, 11, calls=1)
    assert cache_shapes(lm) == [[6, 64]]  # at most the model's 64 positions


@pytest.mark.parametrize("cache", ["graph", "static"])
def test_short_chunks_are_sampled_at_the_batch_size_with_copies_of_their_last_prompt(cache):
    """With a per-shape cache, `batch_size` is the one batch shape: 3 prompts (or the last 3 of 11) sample exactly what
    the first 3 of the 8-row batch padded by hand sample, and only the 8-row decoder (or cache) is made."""
    lm, tok = eos_prone_lm(2.0), tiny_tokenizer()
    gen = GenerationConfig(cache=cache, repetition_penalty=PENALTY)
    for prompts in (PROMPTS[:3], PROMPTS + PROMPTS[:5]):
        torch.manual_seed(0)
        padded = generate(lm, tok, prompts, gen, 6, batch_size=8)
        torch.manual_seed(0)
        chunks = [prompts[i : i + 8] for i in range(0, len(prompts), 8)]
        by_hand = [generate(lm, tok, chunk + [chunk[-1]] * (8 - len(chunk)), gen, 6) for chunk in chunks]
        assert len(padded.responses) == len(prompts)
        assert padded.responses == [r for chunk, out in zip(chunks, by_hand) for r in out.responses[: len(chunk)]]
    kept = lm._cory_graph_decoders if cache == "graph" else lm._cory_static_caches
    assert {key[0] for key in kept} == {8}


def generate_and_decoder(lm, compile_step: bool) -> tuple[list, list]:
    """Two calls' responses from `generate` and, from the same seed, from the model's kept decoder (reused by the
    second call), with the test's repetition penalty and 9 new tokens."""
    from cory.rl.decoding import decoder_for

    tok = tiny_tokenizer()
    gen = GenerationConfig(cache="graph", repetition_penalty=PENALTY)
    torch.manual_seed(0)
    dynamic = [generate(lm, tok, PROMPTS, GenerationConfig(repetition_penalty=PENALTY), 9).response_ids.tolist()
               for _ in range(2)]
    torch.manual_seed(0)
    graph = []
    for _ in range(2):
        enc = tok(PROMPTS, return_tensors="pt", padding=True)
        decoder = decoder_for(lm, len(PROMPTS), 64, gen, tok.pad_token_id, tok.eos_token_id, compile_step=compile_step)
        graph.append(decoder.sample(enc.input_ids, enc.attention_mask, 9, 0, check_every=1).tolist())
    return dynamic, graph


def test_the_compiled_step_samples_what_generate_samples():
    """On a GPU the step is compiled into a CUDA graph; here the same compilation runs on the CPU (inductor's default
    mode), with EOS likely enough that rows end at different steps, over two calls that reuse the decoder."""
    from torch._dynamo.utils import counters

    counters.clear()
    dynamic, compiled = generate_and_decoder(eos_prone_lm(2.0), compile_step=True)
    assert compiled == dynamic
    assert counters["stats"]["unique_graphs"] >= 1  # the step did run compiled


def test_generation_cache_names_the_choices():
    from cory.schema import ConfigError

    with pytest.raises(ConfigError, match="dynamic, static or graph"):
        GenerationConfig(cache="paged")


def test_a_gpu_decoding_step_may_use_cudnn_attention_which_the_rl_processes_turn_off_elsewhere():
    from cory.rl.decoding import decoding_attention

    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)  # as configure_gpu_for_rl does on a GPU
    try:
        with decoding_attention():
            assert torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
        assert not torch.backends.cuda.cudnn_sdp_enabled()  # the update's backward never sees it
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)


@pytest.mark.parametrize("cache", ["graph", "dynamic", "static"])
def test_nan_logits_stop_the_sample_with_one_error_and_no_sampler_assert(cache):
    """A diverged policy (NaN logits) is named once the sample ends, by every sampler: the graph decoder records it on
    the device and draws padding meanwhile; `generate` gets a processor that zeroes the NaN scores, so torch's
    multinomial (a device-side assert on a GPU) never sees them."""
    from cory.rl.ppo import NonFiniteError

    lm = tiny_lm()
    with torch.no_grad():
        lm.transformer.ln_f.weight[3] = float("nan")  # every position's logits become NaN
    with pytest.raises(NonFiniteError, match="non-finite logits reached the sampler"):
        generate(lm, tiny_tokenizer(), PROMPTS, GenerationConfig(cache=cache), max_new_tokens=5)


def test_a_decoder_that_saw_nan_samples_normally_again():
    """The flag is reset per sample: a kept decoder is not poisoned by an earlier failure."""
    from cory.rl.ppo import NonFiniteError

    lm = tiny_lm()
    gen = GenerationConfig(cache="graph")
    torch.manual_seed(0)
    before = generate(lm, tiny_tokenizer(), PROMPTS, gen, max_new_tokens=5).response_ids
    weight = lm.transformer.ln_f.weight.detach().clone()
    with torch.no_grad():
        lm.transformer.ln_f.weight[3] = float("nan")
    with pytest.raises(NonFiniteError):
        generate(lm, tiny_tokenizer(), PROMPTS, gen, max_new_tokens=5)
    with torch.no_grad():
        lm.transformer.ln_f.weight.copy_(weight)
    torch.manual_seed(0)
    assert torch.equal(generate(lm, tiny_tokenizer(), PROMPTS, gen, max_new_tokens=5).response_ids, before)


def eos_prone_llama(strength: float = 2.0):
    """The tiny Llama with EOS made likelier, as in `eos_prone_lm`."""
    lm = tiny_llama()
    with torch.no_grad():
        lm.lm_head.weight[0] += strength * lm.lm_head.weight[0] / lm.lm_head.weight[0].norm() ** 2
    return lm


@pytest.mark.parametrize("compile_step", [False, True], ids=["eager step", "compiled step"])
def test_graph_decoding_of_a_llama_samples_what_generate_samples(compile_step):
    """The paper's GSM8K architecture: the decoder's step (its 4-D mask, position ids and cache slots) on a Llama
    samples what `generate` samples, rows ending at different steps, over two calls that reuse the decoder."""
    dynamic, graph = generate_and_decoder(eos_prone_llama(), compile_step)
    assert graph == dynamic
    assert any(0 in row[:-1] for call in dynamic for row in call)  # a row ended before the last step


@pytest.mark.parametrize("compile_step", [False, True], ids=["eager step", "compiled step"])
def test_a_cache_held_in_the_autocast_dtype_samples_the_same(compile_step):
    """Under bf16 autocast a Llama computes its keys in fp32 where its residual stream is fp32 (the rotary embedding's
    cos/sin follow it; a 4-bit base prepared for training keeps its norms in fp32), and the attention casts the whole
    cache to bf16 at every step. A cache held in bf16 casts each key once, as it is written: the attention reads the
    same numbers, so the same tokens are drawn and the last logits are equal bit for bit."""
    from cory.rl.decoding import decoder_for

    lm, tok = eos_prone_llama(), tiny_tokenizer()
    gen = GenerationConfig(cache="graph", repetition_penalty=PENALTY)
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    drawn = {}
    for dtype in (None, torch.bfloat16):
        decoder = decoder_for(lm, len(PROMPTS), 64, gen, tok.pad_token_id, tok.eos_token_id, compile_step,
                              cache_dtype=dtype)
        torch.manual_seed(0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            tokens = [decoder.sample(enc.input_ids, enc.attention_mask, 9, 0, check_every=1) for _ in range(2)]
        keys = decoder.cache.layers[0].keys
        drawn[dtype] = tokens, decoder.logits.clone(), keys.dtype
    assert drawn[None][2] == torch.float32  # the case this is about: fp32 keys under autocast
    assert drawn[torch.bfloat16][2] == torch.bfloat16
    assert [t.tolist() for t in drawn[torch.bfloat16][0]] == [t.tolist() for t in drawn[None][0]]
    assert torch.equal(drawn[torch.bfloat16][1], drawn[None][1])
