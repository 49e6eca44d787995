"""The report stage's settings (params `report`): how final values, stability and the verdict rules are computed.
Torch- and matplotlib-free, so that `pipeline.params` validates it with the rest of the tree."""

from __future__ import annotations

from dataclasses import dataclass, field

from cory.schema import check, section_path


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
    """Confidence level of every interval of an effect (bootstrap percentiles, Clopper-Pearson)."""
    bootstrap_draws: int = 10000
    """Resamples of the seeds per effect (each run's seeds drawn with replacement, independently of other runs')."""
    bootstrap_seed: int = 0
    """Seed of the bootstrap's generator: the same runs give the same intervals and verdicts."""
    collapse_kl: float = 20.0
    """A seed collapses when its final KL exceeds this: between the summed KLs at iteration 100 that the paper's Fig. 3
    implies for CORY (about 9-12) and for PPO-GPT-2-l (about 28-37), so the paper's own runs would split by it."""
    calibration_kl: float = 10.0
    """The calibration target: single-agent PPO's final KL at least this on every seed, i.e. PPO in the regime of the
    paper's IMDB result (KL in the tens by iteration 100), where CORY's claim is tested."""
    fall_ratio: float = 2.0
    """"CORY's combined reward falls less than PPO's": PPO's fall from start to end above this many times CORY's."""
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
    """claims.json of another run of the profile (a rerun of the same code, or a run of other code or on another GPU,
    which the maintainers' notes name; relative to the project root, {profile} is the profile's name), compared claim
    by claim in REPORT.md; a missing file is said so; null: no comparison."""

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
        check(self.bootstrap_draws >= 100, f"{path}.bootstrap_draws", f"must be >= 100, got {self.bootstrap_draws}")
        check(len(self.imdb_groups) > 0, f"{path}.imdb_groups", "must name at least one experiment group")
        check(len(set(self.imdb_groups)) == len(self.imdb_groups), f"{path}.imdb_groups",
              f"must not repeat a group, got {list(self.imdb_groups)}")
        check(0 < self.decline < 1, f"{path}.decline", f"must be in (0, 1), got {self.decline}")
        check(self.samples >= 0, f"{path}.samples", f"must be >= 0, got {self.samples}")
