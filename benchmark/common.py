"""Helpers shared by the benchmarks and tools (kept out of cory/ and pipeline/, which are DVC dependencies of the stages)."""

from __future__ import annotations

import collections
import random
from pathlib import Path
from typing import Any, Callable

import yaml


QUERY_WORDS = "the movie film was a great bad plot actor story not very good I this one of it and so".split()
"""Words the benchmarks draw IMDB-like queries from (their content does not change an iteration's cost)."""


SMOLLM2 = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
           "tie_word_embeddings": True}
"""SmolLM2-135M-Instruct's architecture (a Llama), as the default profile's base_models.smollm2 converts it from its
GGUF file: the shape the benchmarks build with random weights, without the file."""
RANDOM_MODELS = {"smollm2": SMOLLM2}
"""Base models that are loaded, not trained here (source gguf or hub), whose shape the benchmarks know."""
OBSERVER_WORDS = 'I can make this sentence " more positive:'.split()


def word_tokenizer(vocab_size: int):
    """A whitespace word-level tokenizer of `vocab_size` ids for a random-weight model whose real tokenizer is not at
    hand (a GGUF's): EOS and padding "<|im_end|>" (id 0), the benchmark queries' words, the observer template's, then
    filler words "w<i>". A random model samples filler words, one token each when read back, so prompts hold about as
    many tokens as SmolLM2's tokenizer makes of the same texts (queries 2-8, the observer's 20-45)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = list(dict.fromkeys(["<|im_end|>", "<unk>", *QUERY_WORDS, *OBSERVER_WORDS]))
    words += [f"w{i}" for i in range(vocab_size - len(words))]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|im_end|>",
                                   unk_token="<unk>", padding_side="left")


def random_llama(shape: dict, eos_token_id: int = 0):
    """A Llama of `shape` (LlamaConfig keywords, e.g. SMOLLM2) with random weights, EOS and padding `eos_token_id`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(**shape, bos_token_id=eos_token_id, eos_token_id=eos_token_id,
                                        pad_token_id=eos_token_id))


def llama_matmul_params(shape: dict) -> tuple[int, int]:
    """(the weights every token multiplies in a Llama's blocks, those of its output layer): per block the attention's
    q and o (d x d) and k and v (d x d_kv) and the MLP's three d x d_ff matrices; the output layer's V x d."""
    d, heads, kv = shape["hidden_size"], shape["num_attention_heads"], shape["num_key_value_heads"]
    block = 2 * d * d + 2 * d * (d // heads * kv) + 3 * d * shape["intermediate_size"]
    return shape["num_hidden_layers"] * block, shape["vocab_size"] * d


def queries_of(task: str, n: int, seed: int = 0) -> tuple[list[str], list[str] | None]:
    """n queries of the task's kind (their content does not change the cost, their length does a little)."""
    rng = random.Random(seed)
    if task == "sentiment":
        return [" ".join(rng.choice(QUERY_WORDS) for _ in range(rng.randint(2, 8))) for _ in range(n)], None
    from cory.tasks.config import MathGenConfig
    from cory.tasks.mathgen import generate_problems

    problems = generate_problems(MathGenConfig(n_pretrain=0, n_rl=n, n_test=0, seed=seed))["rl"]
    return [p["question"] for p in problems], [p["answer"] for p in problems]


def profile_params(name: str, folder: Path) -> Path:
    """A profile rendered into `folder`/params.yaml, for the benchmarks to read through $CORY_PARAMS instead of the
    committed params.yaml (e.g. the smoke profile's tiny models on a CPU)."""
    from pipeline.profile import render

    path = Path(folder) / "params.yaml"
    path.write_text(yaml.safe_dump(render(name)))
    return path


def first_seed_job(params, group: str, run: str):
    """The job of `group`/`run` at seed 0 where the run has it, else at its first seed; None if the params have no
    such run (`params`: pipeline.params.Params)."""
    jobs = [job for job in params.jobs.get(group, []) if job.run == run]
    return min(jobs, key=lambda job: job.seed != 0) if jobs else None


def with_settings(train, overrides: dict[str, Any]):
    """A run's resolved TrainConfig with `overrides` (a nested dict of train settings) put over it, so that a setting
    its experiment group or run sets is changed too (the benchmarks' --variant and --set)."""
    from cory.rl.config import TrainConfig
    from cory.schema import from_dict, merge, to_dict

    return from_dict(TrainConfig, merge(to_dict(train), overrides), "train")


def profile_iteration(step: Callable[[], Any], seconds_per_iteration: float, trace: Path | None = None) -> str:
    """Run `step` (one training iteration) once under torch.profiler on a GPU: its kernel count and GPU-busy time
    (the sum of its kernels) against the iteration's wall time, the CUDA kernels that take the most GPU time and the
    host-side operators that take the most CPU time; with `trace`, its Chrome trace there."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    kernels = [e for e in averages if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_ms = sum(e.self_device_time_total for e in kernels) / 1e3
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    return (f"GPU kernels in one iteration: {sum(e.count for e in kernels)} launches, busy {busy_ms:.1f} ms (of "
            f"{1e3 * seconds_per_iteration:.0f} ms per iteration)\n"
            + averages.table(sort_by="cuda_time_total", row_limit=20) + "\n"
            + averages.table(sort_by="self_cpu_time_total", row_limit=20))


class CompileCount:
    """What dynamo compiles in this process from its making on: the graphs, those compiled after `timing_starts()`
    (a recompilation paid in every timed iteration, so in every run), and the graph breaks by reason (a compiled
    region cut in pieces)."""

    def __init__(self):
        from torch._dynamo.utils import counters

        self._counters = counters
        self._graphs_before = self._graphs_warm = self._graphs()
        self._breaks_before = dict(counters["graph_break"])

    def _graphs(self) -> int:
        return self._counters["stats"]["unique_graphs"]

    def timing_starts(self) -> None:
        self._graphs_warm = self._graphs()

    def fields(self) -> dict:
        graphs, breaks = self._graphs(), break_reasons(self._counters["graph_break"], self._breaks_before)
        return {"compiled_graphs": graphs - self._graphs_before,
                "graphs_compiled_while_timed": graphs - self._graphs_warm,
                "graph_breaks": sum(breaks.values()), "graph_break_reasons": dict(breaks.most_common())}


def break_reasons(now: dict, before: dict) -> collections.Counter:
    """Dynamo's graph breaks since `before` by reason, each reason cut to its first 300 characters (the rest is a
    stack and a link), counts of reasons alike in those added up."""
    reasons = collections.Counter()
    for reason, n in now.items():
        if (added := n - before.get(reason, 0)) > 0:
            reasons[reason[:300]] += added
    return reasons
