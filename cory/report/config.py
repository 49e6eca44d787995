"""The report stage's settings (params `report`): how final values, stability and the verdict rules are computed.
Torch- and matplotlib-free, so that `pipeline.params` validates it with the rest of the tree."""

from __future__ import annotations

from dataclasses import dataclass, field

from cory.schema import check, section_path

TEMPLATE_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<jupyter_")
"""Chat-template and notebook tokens a pretrained LM's instruction tuning left (SmolLM2's among them): in an answer to
a movie-review prompt they are leakage, a sign the policy left the language it started from."""


@dataclass
class MechanismConfig:
    """The decision rule of "does CORY beat PPO" (params `report.mechanism`; docs/claims.md): CORY beats PPO where
    its task reward at matched KL lies above PPO's frontier, PPO's runs at several KL coefficients, and above CORY's
    without knowledge transfer (the dilution control), by paired comparisons of one experiment group's runs."""

    group: str
    """The experiment group whose runs it compares (an IMDB group on a pretrained LM)."""
    frontier: list[str]
    """PPO runs of the group at two or more KL coefficients (train.ppo.init_kl_coef): PPO's frontier."""
    cory: list[str]
    """CORY runs of the group (knowledge transfer on), each judged against every frontier run and the control."""
    control: str | None = None
    """A CORY run of the group without knowledge transfer: a gain that this run also shows is dilution of each
    agent's own reward by its partner's, not cooperation. null: no control (the rule is then not the whole rule)."""
    kl_levels: list[float] | None = None
    """KL levels at which rewards are matched (each seed's curves smoothed over report.stability_window iterations,
    the reward where the KL first reaches the level); a level some seed of a compared run never reaches is left out
    of that comparison. null: 4 levels evenly inside the range every seed of both runs crosses."""
    margin: float = 0.1
    """The smallest effect of interest: a reward gain at matched KL of margin x PPO's mean task-reward gain (final -
    iteration 0, over the frontier's runs). A gain whose interval lies below it did not hold."""

    def __post_init__(self) -> None:
        path = section_path("report.mechanism")
        check(len(set(self.frontier)) >= 2, f"{path}.frontier",
              f"PPO's frontier needs runs at two or more KL coefficients, got {self.frontier}")
        check(bool(self.cory), f"{path}.cory", "must name at least one CORY run")
        check(self.kl_levels is None or (bool(self.kl_levels) and all(x > 0 for x in self.kl_levels)),
              f"{path}.kl_levels", f"must be positive KL values (or null: automatic), got {self.kl_levels}")
        check(self.margin > 0, f"{path}.margin", f"must be > 0, got {self.margin}")


@dataclass
class CollapseConfig:
    """When a seed's end state is degenerate (params `report.collapse`): any of these behaviours at its final value
    (the mean over its last report.last_n iterations), against the same run's iteration 0."""

    distinct_2: float = 0.5
    """Diversity lost: the batch's distinct-2 fell below this share of its iteration-0 value."""
    entropy: float = 0.25
    """The policy's per-token entropy fell below this share of its iteration-0 value."""
    reward_fall: float = 0.5
    """The task reward (smoothed over report.stability_window) fell from its peak by more than this share of its rise
    from the start to the peak: a policy that lost half of what it gained."""
    leakage: float = 0.05
    """At least this share of the agent's end-of-run answers (the last iteration's and those alone after training)
    hold a template token (template_tokens)."""
    template_tokens: list[str] = field(default_factory=lambda: list(TEMPLATE_TOKENS))
    rate: float = 0.5
    """"PPO collapses": its rate of degenerate seeds above this; "CORY does not": CORY's below it."""

    def __post_init__(self) -> None:
        path = section_path("report.collapse")
        for name in ("distinct_2", "entropy", "reward_fall", "leakage", "rate"):
            check(0 < getattr(self, name) < 1, f"{path}.{name}", f"must be in (0, 1), got {getattr(self, name)}")


@dataclass
class ReportConfig:
    """The report stage (params `report`): how final values, stability and the verdict rules are computed."""

    last_n: int = 10
    """Final value of a metric = mean over the last last_n iterations of a run (capped at the run's length)."""
    stability_window: int = 10
    """Centred rolling mean (iterations) applied before drawdowns, peaks and curve gaps, to look past batch noise."""
    tolerance: float = 0.2
    """"Similar" / "nearly coincide": a difference of at most this fraction of the curve's scale (see each rule)."""
    kl_ratio: float = 2.0
    """The paper's "PPO's final KL is more than 2x CORY's"."""
    decline: float = 0.1
    """"Peaks then declines": the final value lies this share of the peak's rise (over the smoothed start) below the
    peak."""
    samples: int = 3
    """Generations per table in samples.md."""
    plot_smoothing: int = 1
    """Centred rolling mean (iterations) of each seed's curve in the figures; 1 draws the raw curves."""
    deviations: dict[str, str] = field(default_factory=dict)
    """Settings that differ from the paper's (Tables 1-2) -> why; REPORT.md lists them. Prose, so not a param: the
    report stage fills it from profiles/deviations.yaml, and params.yaml may not set it (pipeline.params)."""
    confidence: float = 0.95
    """Confidence level of every interval (two-sided); each one-sided test is at (1 - confidence) / 2."""
    permutations: int = 100000
    """Rank tests enumerate every arrangement of the seeds up to this many (exact), else draw this many."""
    permutation_seed: int = 0
    """Seed of the rank tests' draws where they do not enumerate: the same runs give the same verdicts."""
    mechanism: MechanismConfig | None = None
    """The decision rule of the report's headline (MechanismConfig); null: the profile runs no such experiment."""
    collapse: CollapseConfig = field(default_factory=CollapseConfig)
    collapse_kl: float = 20.0
    """The KL signal shown beside the behaviours (not one of them): final KL above this, between the summed KLs at
    iteration 100 that the paper's Fig. 3 implies for CORY (about 9-12) and for PPO-GPT-2-l (about 28-37); taken
    from GPT-2 Large at the paper's eta, so it reads another model's scale."""
    calibration_kl: float = 10.0
    """The calibration target: single-agent PPO's final KL at least this on every seed, i.e. PPO in the regime of the
    paper's IMDB result (KL in the tens by iteration 100), where CORY's claim is tested."""
    fall_ratio: float = 2.0
    """"CORY's combined reward falls less than PPO's": PPO's fall from start to end above this many times CORY's."""
    passk_max_k: int = 5
    """pass@k is judged for k up to this: the paper's Fig. 5 spans k = 1-5."""
    imdb_groups: tuple[str, ...] = ("imdb",)
    """The IMDB experiment groups whose runs the Fig. 3, ablation and cooperation claims are made for, each on its
    own (a group without a run skips the claims that need it); claims of a group other than `imdb` have keys
    <group>/<claim>."""
    min_seeds: int = 3
    """Fewest seeds an experiment group that the claims read may run (with test_claims): fewer cannot give an
    interval that means anything."""
    test_claims: bool = True
    """false: the report shows every claim's numbers but judges none (verdict "not tested"), e.g. a 1-seed profile
    that only checks that the stages run; min_seeds is then not enforced."""
    rerun: str | None = "reports/{profile}/rerun/claims.json"
    """claims.json of another run of the profile (relative to the project root, {profile} is the profile's name),
    compared claim by claim in REPORT.md; a missing file is said so; null: no comparison."""

    def __post_init__(self) -> None:
        path = section_path("report")
        for name in ("last_n", "stability_window", "plot_smoothing", "min_seeds"):
            check(getattr(self, name) >= 1, f"{path}.{name}", f"must be >= 1, got {getattr(self, name)}")
        check(self.tolerance > 0, f"{path}.tolerance", f"must be > 0, got {self.tolerance}")
        check(self.kl_ratio > 0, f"{path}.kl_ratio", f"must be > 0, got {self.kl_ratio}")
        check(self.fall_ratio > 0, f"{path}.fall_ratio", f"must be > 0, got {self.fall_ratio}")
        check(self.collapse_kl > 0, f"{path}.collapse_kl", f"must be > 0, got {self.collapse_kl}")
        check(self.calibration_kl > 0, f"{path}.calibration_kl", f"must be > 0, got {self.calibration_kl}")
        check(0 < self.confidence < 1, f"{path}.confidence", f"must be in (0, 1), got {self.confidence}")
        check(self.permutations >= 100, f"{path}.permutations", f"must be >= 100, got {self.permutations}")
        check(self.passk_max_k >= 1, f"{path}.passk_max_k", f"must be >= 1, got {self.passk_max_k}")
        check(len(self.imdb_groups) > 0, f"{path}.imdb_groups", "must name at least one experiment group")
        check(len(set(self.imdb_groups)) == len(self.imdb_groups), f"{path}.imdb_groups",
              f"must not repeat a group, got {list(self.imdb_groups)}")
        check(0 < self.decline < 1, f"{path}.decline", f"must be in (0, 1), got {self.decline}")
        check(self.samples >= 0, f"{path}.samples", f"must be >= 0, got {self.samples}")
