"""How many operators that launch work one forward and backward pass of a model runs: what an eager update pays host
time for, whatever its FLOPs (docs/scale.md, the SmolLM2 rows).

    python -m benchmark.launches [--model smollm2 ...] [--gpt2 LAYERS WIDTH HEADS VOCAB ...] [--batch 8] [--tokens 24]

A --model is a base model of the params (`base_models.<name>.source`: a folder, a hub name, or a GGUF file, converted
as the base_models stage converts it) or a model folder; a --gpt2 a random GPT-2 of that shape. On the CPU, one pass
to warm up, then one counted under torch.profiler: every aten operator but views, reshapes and allocations, which
launch nothing on a GPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

NO_LAUNCH = {"aten::view", "aten::as_strided", "aten::t", "aten::transpose", "aten::reshape", "aten::expand",
             "aten::slice", "aten::unsqueeze", "aten::squeeze", "aten::_unsafe_view", "aten::permute", "aten::select",
             "aten::detach", "aten::alias", "aten::split", "aten::chunk", "aten::narrow", "aten::resolve_conj",
             "aten::resolve_neg", "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::lift_fresh"}
"""Operators that only make a view or an uninitialised tensor."""


def launches(lm, batch: int, tokens: int) -> int:
    """Operators that launch work in one forward and backward pass of `lm` (train mode) over `batch` x `tokens`
    random tokens, a log-probability summed as the loss."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    ids = torch.randint(0, lm.config.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(0))
    lm.train()

    def step():
        lm(input_ids=ids).logits.float().log_softmax(-1)[..., 0].sum().backward()

    step()  # first calls (lazy initialisation) are not a pass's own
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::") and e.key not in NO_LAUNCH)


def load(name: str, params):
    """A base model of the params by name, else a model folder."""
    from transformers import AutoModelForCausalLM

    from benchmark.paper import model_folder

    if name not in params.base_models:
        return AutoModelForCausalLM.from_pretrained(name)
    with tempfile.TemporaryDirectory(prefix="launches_") as scratch:
        return AutoModelForCausalLM.from_pretrained(model_folder(params, name, Path(scratch)))


def main(argv: list[str]) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", default=[], help="a base model of the params, or a model folder")
    parser.add_argument("--gpt2", nargs=4, type=int, action="append", default=[],
                        metavar=("LAYERS", "WIDTH", "HEADS", "VOCAB"), help="a random GPT-2 of this shape")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=24)
    args = parser.parse_args(argv)
    if not args.model and not args.gpt2:
        parser.error("name at least one --model or --gpt2")
    if args.model:
        from pipeline.params import load_params

        params = load_params()  # params.yaml, or $CORY_PARAMS
    models = [(name, lambda name=name: load(name, params)) for name in args.model]
    models += [(f"gpt2 {layers}x{width}, {heads} heads, vocab {vocab}",
                lambda shape=(layers, width, heads, vocab): GPT2LMHeadModel(GPT2Config(
                    n_layer=shape[0], n_embd=shape[1], n_head=shape[2], vocab_size=shape[3])))
               for layers, width, heads, vocab in args.gpt2]
    for name, build in models:
        lm = build()
        layers = lm.config.num_hidden_layers
        print(f"launches: {name}: {launches(lm, args.batch, args.tokens):,} operators that launch work in one forward "
              f"and backward pass ({layers} layers, {args.batch} x {args.tokens} tokens)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
