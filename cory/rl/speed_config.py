"""`train.ppo.speed` (SpeedConfig): how the RL passes run, apart from the algorithm's settings. None of it changes
what a step computes beyond float rounding; cory.rl.config's PPOConfig holds it as `speed`, and names it for the code
that imports the config tree from there. What each setting changes and when to turn it on: docs/speed.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cory.schema import check, section_path


@dataclass
class SpeedConfig:
    """How the RL passes run (params `train.ppo.speed`): precision, fused kernels, compilation and batching. They change
    how fast an iteration runs and its float rounding, not the algorithm; what each bought is in docs/speed.md."""

    mixed_precision: bool = True
    """On a GPU, run the forward passes (sampling, experience, update) under bf16 autocast; false runs them in fp32
    with TF32 matmuls. Weights, optimizer and the PPO math stay fp32 either way."""
    bf16_weights: bool = False
    """Run the forward and backward passes on a bf16 copy of each agent's LM (and a bf16 reference), without autocast;
    the fp32 weights stay the optimizer's and the checkpoints' ("master weights"). Full fine-tuning only; needs
    mixed_precision."""
    align_head: bool = False
    """Run the output layer on its weight padded to a multiple of 64 rows (the same logits: cuBLAS's kernels for
    GPT-2's odd 50,257 rows are slow; cory.rl.kernels.AlignedLMHead)."""
    fused_gelu: bool = False
    """Run transformers' written-out tanh GELU ("gelu_new", GPT-2's) as PyTorch's one fused kernel of the same
    function (cory.rl.kernels.fuse_gelu)."""
    fused_vocab: bool = False
    """On a GPU, compile the passes over the vocabulary (the experience's per-token statistics, the update's token
    log-probabilities) into a few fused kernels (cory.rl.kernels.vocabulary_pass)."""
    compile: bool | Literal["regional"] = False
    """torch.compile the experience's and update's forward passes (not sampling: `generation.cache` compiles that):
    true, the whole forward pass (with `last_hidden`, the model's body); "regional", each transformer block, one graph
    every block reuses (cory.rl.kernels.RegionalForward). For dynamic shapes, or with `pad_shapes` for each padded
    shape. Full fine-tuning only."""
    last_hidden: bool = False
    """Run the experience's and update's passes as the model's body, then its output layer and the value head on the
    body's last hidden state (cory.rl.kernels.BodyAndHead), instead of asking transformers for every layer's hidden
    states: output_hidden_states installs output-capturing hooks on every block, host work in every pass, which
    dynamo cannot trace (`compile` then breaks each block apart). The same numbers. Full fine-tuning only."""
    pad_shapes: int | None = None
    """Pad the prompt block (on the left) and the response block (on the right) of the experience's and update's
    passes to multiples of this many tokens, masked (cory.rl.rollout.pad_blocks), so that the passes see a few
    shapes, and with `compile` each is compiled for its fixed shape instead of for dynamic ones. The same numbers up
    to float rounding, for more tokens per pass. null: the batch's own widths."""
    forward_batch_size: int | None = None
    """Samples per no-grad forward pass when building experience (less memory); null: the whole batch at once."""
    update_batch_size: int | None = None
    """Samples per forward/backward pass of the PPO update. A multiple of ppo.mini_batch_size dividing
    mini_batch_size x gradient_accumulation_steps: several mini-batches of one optimizer step in one pass, each still
    its own loss (its own masked means, ratio check and statistics), fewer, larger passes where memory allows. A
    divisor of mini_batch_size (with gradient_accumulation_steps 1): one mini-batch in several passes, each adding its
    part of the mini-batch's loss to the gradient, which is kept or dropped once the whole mini-batch's ratio and
    loss are known; less memory (the activations of fewer rows at once). Either way the step is the same up to float
    rounding (cory.rl.learner.ppo_update). null: one mini-batch per pass."""
    dequantize_4bit: bool = False
    """With train.load_in_4bit, also hold the 4-bit base's weights dequantised in bf16 and run every pass on them:
    the product bitsandbytes computes from the same NF4 weights (up to float rounding), without dequantising every
    weight at every call; 2 bytes more per quantised weight (13.0 GB for Llama-2-7b; cory.rl.lora)."""

    def __post_init__(self) -> None:
        path = section_path("train.ppo.speed")
        for name in ("forward_batch_size", "update_batch_size", "pad_shapes"):
            value = getattr(self, name)
            check(value is None or value > 0, f"{path}.{name}", f"must be > 0 or null, got {value}")
        check(self.mixed_precision or not self.bf16_weights, f"{path}.bf16_weights",
              "runs the passes in bf16, which mixed_precision: false turns off; set one of them the other way")

    @property
    def autocast(self) -> bool:
        """Whether the passes run under bf16 autocast (on a GPU): mixed precision without bf16 weight copies."""
        return self.mixed_precision and not self.bf16_weights
