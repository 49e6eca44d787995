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

    def __post_init__(self) -> None:
        path = section_path("report")
        for name in ("last_n", "stability_window", "plot_smoothing"):
            check(getattr(self, name) >= 1, f"{path}.{name}", f"must be >= 1, got {getattr(self, name)}")
        check(self.tolerance > 0, f"{path}.tolerance", f"must be > 0, got {self.tolerance}")
        check(self.kl_ratio > 0, f"{path}.kl_ratio", f"must be > 0, got {self.kl_ratio}")
        check(0 < self.decline < 1, f"{path}.decline", f"must be in (0, 1), got {self.decline}")
        check(self.samples >= 0, f"{path}.samples", f"must be >= 0, got {self.samples}")
