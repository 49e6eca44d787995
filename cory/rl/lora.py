"""LoRA: the agents' copies as adapters on one frozen (optionally 4-bit) base, and their merged saves.

With `train.lora_rank`, ONE frozen base holds one named LoRA adapter per agent ("llm1", "llm2"), and the reference
is that same base with the adapters switched off (the official code's 7B setting: LoraConfig r=16, alpha=16, bias
none, on a 4-bit base; docs/algorithm.md). An agent's saved model is the base with its adapter merged in, a plain
transformers folder.
"""

from __future__ import annotations

import copy
import types

import torch

from cory.schema import ConfigError


def lora_config(rank: int, alpha: float):
    """The official code's adapter (docs/algorithm.md: LoraConfig(r=16, lora_alpha=16, bias="none")), on peft's default
    target modules for the architecture (the paper names none)."""
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=alpha, bias="none", task_type="CAUSAL_LM")


def with_lora_adapters(lm, names: list[str], rank: int, alpha: float):
    """`lm` (modified in place, frozen) wrapped by peft with one trainable LoRA adapter per name; the first is active.

    Adapters are added in `names` order, so they draw their random initial A matrices from torch's RNG in the order
    separate per-agent copies did: the same seed gives the same adapters either way."""
    from peft import get_peft_model, prepare_model_for_kbit_training

    if getattr(lm, "is_loaded_in_4bit", False):
        # As trl's value-head model (the paper's trainer) prepares a k-bit base for peft: unquantised weights
        # (embeddings, norms, head) to fp32. Without gradient checkpointing: a 4-bit 7B base leaves the memory.
        prepare_model_for_kbit_training(lm, use_gradient_checkpointing=False)
    model = get_peft_model(lm, lora_config(rank, alpha), adapter_name=names[0])
    for name in names[1:]:
        model.add_adapter(name, lora_config(rank, alpha))
    model.set_adapter(names[0])
    return model


def dequantize_4bit_base(model) -> int:
    """Run every 4-bit linear layer of `model` on a bf16 copy of its dequantised weight (ppo.speed.dequantize_4bit).

    bitsandbytes computes a 4-bit layer's product as the NF4 weight dequantised to the compute dtype times the input
    (for large inputs literally so; small ones in a fused kernel): every call of every pass dequantises all 6.5B
    weights of a 7B model again, a pass that reads and writes them for what one product needs. The copy is made once;
    the base never changes (the adapters train), so it stays the base the paper trained on, in the dtype bitsandbytes
    computes in. The layer, its packed weight and its saved state are unchanged (`merged_state_dict` still reads the
    NF4 weight); the copy is a non-persistent buffer. Returns the bytes the copies hold."""
    import bitsandbytes as bnb

    held = 0
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit) and not hasattr(module, "dense_weight"):
            dtype = module.compute_dtype or torch.bfloat16
            dense = bnb.functional.dequantize_4bit(module.weight.data, module.weight.quant_state).to(dtype)
            # a buffer's address is fixed for a compiled decoding step's CUDA graph (cory.rl.decoding), which would
            # otherwise copy every weight into a static input of its own at every replay
            torch._dynamo.mark_static_address(dense)
            module.register_buffer("dense_weight", dense, persistent=False)
            module.forward = types.MethodType(_dense_forward, module)
            held += dense.numel() * dense.element_size()
    return held


def _dense_forward(self, x: torch.Tensor) -> torch.Tensor:
    """bitsandbytes' Linear4bit.forward with its product taken on the dequantised copy: the input in the compute dtype,
    the output back in the input's."""
    bias = None if self.bias is None else self.bias.to(self.dense_weight.dtype)
    return torch.nn.functional.linear(x.to(self.dense_weight.dtype), self.dense_weight, bias).to(x.dtype)


class AdaptersDisabled:
    """The reference pi_0 of a shared LoRA model: the same module called with every adapter off, in eval mode.

    Callable like the model it wraps (`forward_response` calls `lm(**inputs)`), so the learner treats it like a
    frozen copy; it holds no weights of its own."""

    def __init__(self, model):
        self.model = model

    def __call__(self, **inputs):
        was_training = self.model.training
        self.model.eval()
        try:
            with self.model.disable_adapter():
                return self.model(**inputs)
        finally:
            self.model.train(was_training)


@torch.no_grad()
def merged_state_dict(model, adapter: str) -> dict[str, torch.Tensor]:
    """The weights of the plain model that `model` (a peft model) computes with `adapter` active, under the plain
    model's names: W + scale * B A for every LoRA layer (peft's get_delta_weight, which knows GPT-2's transposed
    Conv1D), every 4-bit weight dequantised. `model` is not modified (peft's merge_and_unload would merge in place)."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    state = {k.replace(".base_layer.", "."): v for k, v in base.state_dict().items() if ".lora_" not in k}
    for name, module in base.named_modules():
        if name.endswith(".base_layer"):
            continue  # handled with the LoRA layer around it
        if isinstance(module, LoraLayer):
            weight = _dense_weight(module.get_base_layer())
            if adapter in module.lora_A or adapter in module.lora_embedding_A:
                weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
        elif _is_4bit(getattr(module, "weight", None)):
            weight = _dense_weight(module)
        else:
            continue
        key = f"{name}.weight"
        for stale in [k for k in state if k.startswith(key + ".")]:  # a 4-bit weight's quantisation statistics
            del state[stale]
        state[key] = weight.contiguous()
    return state


def _is_4bit(weight) -> bool:
    return type(weight).__name__ == "Params4bit"  # bitsandbytes' packed NF4/FP4 weight


def _dense_weight(layer) -> torch.Tensor:
    """A linear layer's weight as a plain tensor, a 4-bit one dequantised by bitsandbytes' pure function (peft's
    dequantize_module_weight re-assigns a CPU layer's weight, which changed the reference's outputs here)."""
    weight = layer.weight
    if _is_4bit(weight):
        import bitsandbytes as bnb

        return bnb.functional.dequantize_4bit(weight.data, weight.quant_state)
    return weight.detach()


def plain_model(model, state: dict[str, torch.Tensor]):
    """A transformers model of `model`'s architecture holding `state` (no copy: tensors are assigned), without peft
    layers or a quantisation config, so that its folder loads with AutoModelForCausalLM.from_pretrained alone."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.get_base_model().config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(state, strict=True, assign=True)
    plain.tie_weights()
    return plain


def nf4_quantization_config(device: str):
    """transformers' BitsAndBytesConfig for the paper's 4-bit base (QLoRA's NF4, bf16 compute), or one ConfigError
    naming train.load_in_4bit where it cannot run: bitsandbytes missing, or no CUDA device. (bitsandbytes 0.50 runs
    4-bit on CPU too, but on AVX512-BF16 CPUs it repacks the weights at the first eval-mode forward, after which no
    gradient reaches the adapters: tests/test_shared_lora.py.) Called before any model is loaded."""
    import importlib.util

    problems = []
    if importlib.util.find_spec("bitsandbytes") is None:
        problems.append("the bitsandbytes package is not installed (pip install bitsandbytes)")
    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        problems.append(f"it needs a CUDA GPU (device {device!r}, CUDA available: {torch.cuda.is_available()})")
    if problems:
        raise ConfigError(f"train.load_in_4bit: 4-bit NF4 loading of the base model is on, but "
                          f"{'; and '.join(problems)}. Set it to false to train the base in bf16/fp32.")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
