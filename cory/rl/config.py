"""The trainer's config: one typed tree shared by PPO and CORY.

Every section is a dataclass whose fields carry a one-line docstring (the comment under each field). The same
`PPOConfig` drives the single-agent baseline and both CORY agents; CORY only adds a `CORYConfig` (GRPO a
`GRPOConfig`: cory.rl.algorithm_config), so the two can never drift apart the way the official scripts did
(docs/algorithm.md). `cory.schema.from_dict` builds a section
from a block of `params.yaml` and names a wrong setting by its dotted path.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal, get_args

from cory.rl.algorithm_config import IMDB_OBSERVER_TEMPLATE, CORYConfig, GRPOConfig  # the sections CORY and GRPO add
from cory.rl.speed_config import SpeedConfig  # train.ppo.speed: how the passes run, apart from the algorithm
from cory.schema import check, section_path


KL_ESTIMATORS = ("kl", "abs", "mse", "full")
ALGORITHMS = ("ppo", "rloo", "grpo")
"""train.algorithm: PPO with a value head, or one of the critic-free algorithms of cory.rl.critic_free."""


@dataclass
class GenerationConfig:
    """Sampling settings for rollouts (paper/TRL IMDB defaults, docs/algorithm.md)."""

    response_length: tuple[int, int] = (4, 16)
    """Inclusive range [min, max]; one max_new_tokens is drawn uniformly per iteration and shared by both roles."""
    top_k: int = 0
    """0 disables top-k filtering (pure sampling, as in the paper)."""
    top_p: float = 1.0
    """1.0 disables nucleus filtering."""
    temperature: float = 1.0
    """Sampling temperature; log-probs for PPO are always taken at temperature 1, as in TRL."""
    repetition_penalty: float = 1.1
    """HF repetition penalty used while sampling (so the sampling distribution differs slightly from pi_theta)."""
    stop_at_eos: bool = True
    """Cut each response after its first EOS (the EOS itself is kept and trained on, as in TRL). False: EOS ends
    nothing; it may be sampled and sampling goes on, so every response has the drawn length (what HF's
    eos_token_id=-1 does; suppress_eos instead never samples it)."""
    suppress_eos: bool = False
    """Never sample EOS, so every response has the drawn length. GPT-2 Large almost never ends a review within 16
    tokens; a small model trained with EOS after every review does, and PPO then learns to end at once (an empty
    response carries the least summed KL penalty)."""
    cache: str = "dynamic"
    """The key/value cache of `generate`: "dynamic" (transformers' default, grown token by token); "static", one
    preallocated cache per batch size and length that the model keeps, whose decoding step transformers compiles on a
    GPU; "graph", a static cache and the whole decoding step as one compiled step (cory.rl.decoding). All three sample
    the same tokens, up to float rounding on a GPU (see docs/speed.md)."""
    cache_length: int = 0
    """With cache "static" or "graph": the least length of a cache (prompt + response tokens; 0: none), capped at the
    model's positions. Each new length is another compilation; a longer cache serves shorter prompts with the same
    tokens (cory.rl.decoding.decoder_for), so one length can serve a run's pioneer, observer and probe prompts."""

    def __post_init__(self) -> None:
        path = section_path("train.ppo.generation")
        check(self.cache in ("dynamic", "static", "graph"), f"{path}.cache",
              f"must be dynamic, static or graph, got {self.cache!r}")
        check(self.cache_length >= 0, f"{path}.cache_length", f"must be >= 0, got {self.cache_length}")
        lo, hi = self.response_length
        check(1 <= lo <= hi, f"{path}.response_length", f"need 1 <= min <= max, got {list(self.response_length)}")
        check(self.top_k >= 0, f"{path}.top_k", f"must be >= 0, got {self.top_k}")
        check(0.0 < self.top_p <= 1.0, f"{path}.top_p", f"must be in (0, 1], got {self.top_p}")
        check(self.temperature > 0, f"{path}.temperature", f"must be > 0, got {self.temperature}")
        check(self.repetition_penalty > 0, f"{path}.repetition_penalty", f"must be > 0, got {self.repetition_penalty}")


@dataclass
class PPOConfig:
    """The PPO step of trl 0.7.x (`PPOTrainer.step`), docs/algorithm.md.

    The defaults are the paper's IMDB Table 1, except three settings that this project measured to keep PPO and CORY
    from collapsing (profiles/deviations.yaml, docs/results.md): the k1 KL estimator in the reward (`kl_penalty`
    "kl"), no dropout (`dropout` "none") and no optimizer step on a runaway mini-batch (`ratio_threshold_mode`
    "skip"). `PPOConfig.paper()` is the paper's step as trl 0.7 runs it."""

    learning_rate: float = 1.41e-5
    """Adam learning rate (constant, no schedule)."""
    batch_size: int = 256
    """Responses (episodes) per iteration: the rollout batch the PPO epochs run over. With samples_per_query k,
    batch_size / k distinct queries are drawn per iteration."""
    samples_per_query: int = 1
    """k: responses sampled for each query in one batch (1, the paper's, samples one). k > 1 puts k attempts at
    the same query side by side, which is what `group_baseline` needs."""
    group_baseline: bool = False
    """Subtract from each training score the mean score of the other k - 1 responses to the same query (the
    leave-one-out baseline of RLOO, Ahmadian et al. 2024) before score scaling. Under a 0/1 reward most of the
    score's variance is between queries (a problem is mostly solved or mostly failed); this removes it, so what is
    left says which attempt was better. PPO is otherwise unchanged (value head, GAE, clipping, KL)."""
    mini_batch_size: int = 256
    """Samples per forward/backward pass in the PPO update."""
    gradient_accumulation_steps: int = 1
    """Mini-batches accumulated per optimizer step."""
    ppo_epochs: int = 4
    """Passes over the rollout batch per iteration, each with a fresh random permutation."""
    gamma: float = 1.0
    """Discount factor of GAE."""
    lam: float = 0.95
    """GAE lambda."""
    cliprange: float = 0.2
    """PPO ratio clip epsilon (the paper's "gradient clip range")."""
    cliprange_value: float = 0.2
    """Value clip range around the rollout values."""
    vf_coef: float = 0.1
    """Value-loss coefficient (beta in the paper's Eq. 13)."""
    ratio_threshold: float = 10.0
    """A mini-batch whose mean ratio exceeds this is skipped; how, `ratio_threshold_mode` says."""
    ratio_threshold_mode: Literal["skip", "trl"] = "skip"
    """What a skipped mini-batch does. "skip": no backward, so it adds nothing to its optimizer step, and a step
    whose mini-batches were all skipped leaves the weights and Adam's moments as they were. "trl": as trl 0.7-0.11
    (`PPOTrainer.loss` multiplies the loss by 0, `train_minibatch` still calls `optimizer.step()`): a zero gradient,
    on which Adam still steps, moving the weights along its momentum. A non-finite loss is never backpropagated,
    whatever the mode (`on_nonfinite`)."""
    max_grad_norm: float | None = None
    """Clip the gradient norm to this value; None disables clipping (the paper's setting)."""
    kl_penalty: Literal["kl", "abs", "mse", "full"] = "kl"
    """Per-token KL estimator in the reward: kl = log p - log q, abs, mse = 0.5 (log p - log q)^2, full = exact KL
    (the paper's and trl's; with it every IMDB group of this project collapsed: profiles/deviations.yaml)."""
    init_kl_coef: float = 0.3
    """Initial KL coefficient eta (beta of the controller)."""
    adaptive_kl: bool = True
    """Adaptive KL controller (Ziegler et al. 2019) as in the official code; False keeps eta fixed."""
    kl_target: float = 6.0
    """Target KL (summed over the response) of the adaptive controller."""
    kl_horizon: float = 10000.0
    """Horizon of the adaptive controller."""
    use_score_scaling: bool = False
    """Divide scores by the running std of all scores seen so far."""
    use_score_norm: bool = False
    """With score scaling, also subtract the running mean."""
    score_clip: float | None = None
    """Clip (scaled) scores to [-score_clip, score_clip]; None disables."""
    whiten_rewards: bool = False
    """Whiten per-token rewards before GAE (without shifting the mean), as TRL's option, then set padding back to 0,
    so no response's advantages depend on the padding after it. trl 0.7-0.11 (`compute_advantages`) does not re-mask:
    with a right-padding tokenizer (GPT-2's default) each pad after a response gets reward
    mean * (1 - 1 / sqrt(var + 1e-8)), which GAE carries, discounted by gamma * lam per token, into that response's
    advantages, so they depend on how much longer the batch's longest query + response is. Not offered here (this
    layout pads differently, so it could not match trl's numbers anyway); off in the paper and in trl by default."""
    dropout: Literal["none", "trl", "update"] = "none"
    """Where the policy's and value head's dropout acts (the frozen reference never drops). "trl": as trl 0.7-0.11's
    `PPOTrainer` really runs: the experience forward and the PPO update's forward (`batched_forward_pass`, which calls
    `model.eval()`) have no dropout, so a step is the same at any dropout rate; but `train_minibatch` then calls
    `model.train()` and nothing switches it back, so from the second iteration on the policy samples with dropout on
    (the first samples in eval mode, where `from_pretrained` leaves a model). Evaluation always samples in eval mode.
    "none": every dropout set to p = 0 (trl's PPOv2 `disable_dropout`, OpenRLHF): no dropout anywhere. "update":
    dropout in the update's forward only, so its log-probs differ from the experience's ones before any step (ratio
    != 1); not what trl does, but what this project first ran as "dropout on" (`disable_dropout: false`)."""
    on_nonfinite: Literal["error", "skip"] = "error"
    """What a NaN or inf does. "error": a non-finite task score, loss, gradient or PPO statistic stops the run with
    an error naming the iteration, the agent and the source (one NaN score would otherwise poison the running score
    moments and silently turn every later update into a skipped no-op). "skip": samples whose task score is not
    finite are left out of the update (their whole query group with group_baseline) and counted in
    `dropped_samples`; a mini-batch with a non-finite loss is skipped and one with a non-finite gradient is not
    stepped on (both counted); non-finite log-probs or values still stop the run (the weights are broken)."""
    zero_init_value_head: bool = False
    """Start the value head at V = 0 (weights and bias 0) instead of nn.Linear's random init (trl's). With lam 1 the
    first advantages are then exactly the (baselined) scores, not scores minus a random per-token value, and no
    value-loss gradient reaches the shared body until the head has learned something."""
    speed: SpeedConfig = field(default_factory=SpeedConfig)
    """How the passes run: precision, kernels, batching (`train.ppo.speed`); none of it changes the algorithm."""
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    """Sampling settings."""

    def __post_init__(self) -> None:
        path = section_path("train.ppo")
        for name in ("learning_rate", "batch_size", "mini_batch_size", "gradient_accumulation_steps", "ppo_epochs",
                     "samples_per_query"):
            check(getattr(self, name) > 0, f"{path}.{name}", f"must be > 0, got {getattr(self, name)}")
        check(0.0 <= self.gamma <= 1.0, f"{path}.gamma", f"must be in [0, 1], got {self.gamma}")
        check(0.0 <= self.lam <= 1.0, f"{path}.lam", f"must be in [0, 1], got {self.lam}")
        for name in ("cliprange", "cliprange_value", "ratio_threshold"):
            check(getattr(self, name) > 0, f"{path}.{name}", f"must be > 0, got {getattr(self, name)}")
        for name in ("vf_coef", "init_kl_coef"):
            check(getattr(self, name) >= 0, f"{path}.{name}", f"must be >= 0, got {getattr(self, name)}")
        check(self.kl_target > 0, f"{path}.kl_target", f"must be > 0, got {self.kl_target}")
        check(self.kl_horizon > 0, f"{path}.kl_horizon", f"must be > 0, got {self.kl_horizon}")
        check(
            self.kl_penalty in KL_ESTIMATORS,
            f"{path}.kl_penalty",
            f"unknown KL estimator {self.kl_penalty!r}; choose one of {', '.join(KL_ESTIMATORS)}",
        )
        for name in ("ratio_threshold_mode", "dropout", "on_nonfinite"):  # from_dict checks these; PPOConfig(...) too
            allowed, value = get_args(typing.get_type_hints(PPOConfig)[name]), getattr(self, name)
            check(value in allowed, f"{path}.{name}", f"must be one of {list(allowed)}, got {value!r}")
        for name in ("max_grad_norm", "score_clip"):
            value = getattr(self, name)
            check(value is None or value > 0, f"{path}.{name}", f"must be > 0 or null, got {value}")
        check(
            not self.use_score_norm or self.use_score_scaling,
            f"{path}.use_score_norm",
            "only takes effect with use_score_scaling: true",
        )
        check(
            self.batch_size % self.backward_batch_size == 0,
            f"{path}.mini_batch_size",
            f"mini_batch_size x gradient_accumulation_steps = {self.backward_batch_size} must divide "
            f"batch_size = {self.batch_size}",
        )

        passes = self.speed.update_batch_size
        check(
            passes is None or (passes % self.mini_batch_size == 0 and self.backward_batch_size % passes == 0)
            or self.mini_batch_size % passes == 0,
            f"{path}.speed.update_batch_size",
            f"must be a multiple of mini_batch_size = {self.mini_batch_size} that divides mini_batch_size x "
            f"gradient_accumulation_steps = {self.backward_batch_size}, or a divisor of mini_batch_size, got {passes}",
        )
        check(
            not self.split_minibatches or self.gradient_accumulation_steps == 1,
            f"{path}.speed.update_batch_size",
            f"below mini_batch_size = {self.mini_batch_size} needs gradient_accumulation_steps 1 (one mini-batch per "
            f"optimizer step), got {self.gradient_accumulation_steps}",
        )
        check(
            self.batch_size % self.samples_per_query == 0,
            f"{path}.samples_per_query",
            f"must divide batch_size = {self.batch_size}, got {self.samples_per_query}",
        )
        check(
            not self.group_baseline or self.samples_per_query >= 2,
            f"{path}.group_baseline",
            "needs samples_per_query >= 2 (a query's other responses are its baseline)",
        )

    @classmethod
    def paper(cls, **changes) -> "PPOConfig":
        """The paper's PPO step as its code (trl 0.7) runs it: Table 1's IMDB settings with the exact KL in the reward
        ("full"), trl's dropout and ratio-threshold behaviour, and the score scaling of the official CORY script (the
        `paper` profile's IMDB runs, speed settings aside). `changes` override single settings."""
        settings = dict(kl_penalty="full", dropout="trl", ratio_threshold_mode="trl", use_score_scaling=True,
                        use_score_norm=True)
        return cls(**{**settings, **changes})

    @property
    def queries_per_batch(self) -> int:
        """Distinct queries per iteration."""
        return self.batch_size // self.samples_per_query

    @property
    def backward_batch_size(self) -> int:
        """Samples per optimizer step."""
        return self.mini_batch_size * self.gradient_accumulation_steps

    @property
    def optimizer_steps_per_epoch(self) -> int:
        return self.batch_size // self.backward_batch_size

    @property
    def update_pass_size(self) -> int:
        """Samples per forward/backward pass of the update (speed.update_batch_size, else one mini-batch)."""
        return self.speed.update_batch_size or self.mini_batch_size

    @property
    def split_minibatches(self) -> bool:
        """Whether each mini-batch runs in several passes (speed.update_batch_size below mini_batch_size)."""
        return self.update_pass_size < self.mini_batch_size


@dataclass
class TrainConfig:
    """One RL fine-tuning run: PPO (n_agents 1) or CORY (n_agents 2) on one task."""

    iterations: int = 100
    """PPO iterations (one rollout batch each)."""
    seed: int = 0
    """Seeds python, numpy and torch once, at the start (never again at a role exchange: docs/algorithm.md)."""
    algorithm: Literal["ppo", "rloo", "grpo"] = "ppo"
    """What each agent's step is, PPO and CORY alike: "ppo" (a value head, GAE, the clipped losses: trl 0.7's step);
    "rloo" (no value head: each answer's return, its score less beta x its summed KL estimate as PPO's reward has it,
    less the mean return of the other k - 1 answers to its query); "grpo" (no value head: the score less its group's
    mean over the group's std, and beta x k3 KL in the loss, train.grpo). k = ppo.samples_per_query, at least 2 for
    rloo and grpo (docs/algorithm.md)."""
    prompt_template: str = "{query}"
    """How a query becomes the pioneer's (and PPO's) prompt, e.g. the GSM8K one-shot template."""
    combined_reward_eta: float | None = None
    """eta of the reported combined reward r_c = task reward - eta * KL; None uses ppo.init_kl_coef."""
    samples_to_log: int = 16
    """Generations per logged sample table."""
    probe_every: int = 0
    """Every this many iterations (from iteration 0; and at the last), LLM1 alone answers the same `probe_queries`
    RL prompts `probe_samples` times each: llm1/probe_task_reward. The batch's task_reward moves with which prompts
    each iteration drew (16 math problems of mixed difficulty swing it more than training does); the probe's fixed
    prompts do not. Its sampling uses its own copy of the RNG state, so it leaves training as it is. 0: off."""
    probe_queries: int = 64
    """Prompts of the probe: the last `probe_queries` of the task's prompt file, the same for every run and seed."""
    probe_samples: int = 4
    """Answers per probe prompt."""
    lora_rank: int | None = None
    """Train LoRA adapters of this rank (peft) instead of every weight, as the paper's 7B runs must; None = full."""
    lora_alpha: float = 16.0
    """LoRA scaling alpha (the official code's LoraConfig: r=16, alpha=16)."""
    load_in_4bit: bool = False
    """Load the frozen base in 4-bit NF4 with bf16 compute (bitsandbytes; QLoRA-style, the paper's Llama setting);
    needs lora_rank, bitsandbytes and a CUDA GPU."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    cory: CORYConfig = field(default_factory=CORYConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)

    def __post_init__(self) -> None:
        path = section_path("train")
        check(self.algorithm in ALGORITHMS, f"{path}.algorithm",
              f"unknown algorithm {self.algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
        if self.algorithm != "ppo":  # a critic-free algorithm's baseline is the other answers to the same query
            k = self.ppo.samples_per_query
            check(k >= 2, f"{path}.ppo.samples_per_query", f"{self.algorithm} needs at least 2 answers per query (the "
                  f"others are each answer's baseline), got {k}")
            check(not self.ppo.group_baseline, f"{path}.ppo.group_baseline",
                  f"PPO's option; {self.algorithm} has its own group baseline: set it false")
        check(self.iterations > 0, f"{path}.iterations", f"must be > 0, got {self.iterations}")
        check("{query}" in self.prompt_template, f"{path}.prompt_template", "must contain {query}")
        check(
            self.combined_reward_eta is None or self.combined_reward_eta >= 0,
            f"{path}.combined_reward_eta",
            f"must be >= 0 or null, got {self.combined_reward_eta}",
        )
        check(self.samples_to_log >= 0, f"{path}.samples_to_log", f"must be >= 0, got {self.samples_to_log}")
        for name in ("probe_every",):
            check(getattr(self, name) >= 0, f"{path}.{name}", f"must be >= 0, got {getattr(self, name)}")
        for name in ("probe_queries", "probe_samples"):
            check(getattr(self, name) > 0, f"{path}.{name}", f"must be > 0, got {getattr(self, name)}")
        check(self.lora_rank is None or self.lora_rank > 0, f"{path}.lora_rank", f"must be > 0 or null, got {self.lora_rank}")
        check(self.lora_alpha > 0, f"{path}.lora_alpha", f"must be > 0, got {self.lora_alpha}")
        check(not (self.ppo.speed.compile and self.lora_rank is not None), f"{path}.ppo.speed.compile",
              "compiles full fine-tuning only; set it false with train.lora_rank")
        check(not (self.ppo.speed.bf16_weights and self.lora_rank is not None), f"{path}.ppo.speed.bf16_weights",
              "copies full fine-tuning's weights only; set it false with train.lora_rank")
        check(not (self.ppo.speed.last_hidden and self.lora_rank is not None), f"{path}.ppo.speed.last_hidden",
              "splits a plain model's body from its output layer; set it false with train.lora_rank")
        check(not self.load_in_4bit or self.lora_rank is not None, f"{path}.load_in_4bit",
              "needs lora_rank: 4-bit weights cannot be fine-tuned, only adapters on them")
        check(not self.ppo.speed.dequantize_4bit or self.load_in_4bit, f"{path}.ppo.speed.dequantize_4bit",
              "dequantises a 4-bit base only; set it false without train.load_in_4bit")

    @classmethod
    def paper_imdb(cls, **changes) -> "TrainConfig":
        """The paper's IMDB run (Table 1): `PPOConfig.paper()` and the official code's observer prompt; `changes`
        override top-level settings (e.g. iterations, or cory=CORYConfig(n_agents=1, ...) for its PPO baseline)."""
        cory = CORYConfig(observer_template=IMDB_OBSERVER_TEMPLATE)
        return cls(**{"ppo": PPOConfig.paper(), "cory": cory, **changes})

    @property
    def eta(self) -> float:
        return self.ppo.init_kl_coef if self.combined_reward_eta is None else self.combined_reward_eta
