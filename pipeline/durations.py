"""How long a profile's `dvc repro` and the test suite take, read from committed measurements, never typed in: the
README's quick start, the stop message of a GPU profile on a CPU and the tests that hold them together all read it
here, so they cannot disagree.

- default: the committed run's stage clocks (outputs/default/metrics/timing/*.json: the first stage process's start
  to the last stage's end, as REPORT.md's time table counts them) on the GPU its runs name (reports/default/runs.tgz,
  each run's provenance.json);
- paper: the projection of reports/paper/scale.json (every run measured, one after another, iterations only);
- smoke and the test suite: profiles/measured.json, which `python -m pipeline.durations smoke` writes from the last
  smoke repro of this checkout (outputs/smoke/metrics/timing/), and whose `tests` entry holds CI's time for the
  README's test command.
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.paths import ROOT, shown

MEASURED = ROOT / "profiles" / "measured.json"
"""Measurements without a committed output of their own: the smoke repro (outputs/smoke is git-ignored) and CI's run
of the test suite."""


@dataclass
class Duration:
    """How long something took, where."""

    seconds: float
    where: str
    """The machine, e.g. "one NVIDIA H100 80GB HBM3", "a 2-core CPU"."""
    source: str
    """The committed file(s) the number comes from."""
    what: str = "the last measured repro took"
    """What the number is, as a sentence's start."""

    @property
    def minutes(self) -> int:
        return max(1, round(self.seconds / 60))

    def text(self) -> str:
        """'27 minutes on one NVIDIA H100 80GB HBM3', '14.96 hours on ...' from 10 hours on."""
        if self.seconds >= 36000:
            return f"{self.seconds / 3600:.2f} hours on {self.where}"
        return f"{self.minutes} minute{'s' if self.minutes != 1 else ''} on {self.where}"


REPORT_GAP = 60.0
"""Seconds between the last stage's end and the report stage's start within one `dvc repro` at most."""


def stage_span(timing_dir: Path) -> float | None:
    """Seconds from the first stage process's start to the last stage's end, from a profile's timing files; None
    without them. The report stage counts where it ran in the same repro (it started within REPORT_GAP seconds of the
    other stages' end): a committed report may have been made again later, alone."""
    timings = [json.loads(p.read_text()) for p in sorted(Path(timing_dir).glob("*.json"))]
    stages = [t for t in timings if t.get("stage") != "report"]
    if not stages or any(t.get("finished_at") is None for t in timings):
        return None
    start = min(t.get("process_started_at") or t["started_at"] for t in stages)
    end = max(t["finished_at"] for t in stages)
    for report in (t for t in timings if t.get("stage") == "report"):
        if 0 <= (report.get("process_started_at") or report["started_at"]) - end <= REPORT_GAP:
            end = report["finished_at"]
    return end - start


def run_devices(archive: Path) -> list[str]:
    """The device each run of a committed repro trained on (the provenance.json of each run in runs.tgz)."""
    with tarfile.open(archive) as tar:
        return [json.load(tar.extractfile(m))["device"] for m in tar.getmembers()
                if m.name.endswith("/provenance.json")]


def repro_time(profile: str, root: Path = ROOT) -> Duration | None:
    """How long `dvc repro` of `profile` took where it was last measured (see the module docstring); None where no
    committed measurement exists."""
    if profile == "default":
        timing, archive = root / "outputs/default/metrics/timing", root / "reports/default/runs.tgz"
        seconds = stage_span(timing)
        if seconds is None or not archive.is_file():
            return None
        devices = run_devices(archive)
        return Duration(seconds, f"one {' / '.join(sorted(set(devices)))}", f"{shown(timing)}, {shown(archive)}",
                        f"the last measured repro ({len(devices)} runs) took")
    if profile == "paper":
        scale = root / "reports/paper/scale.json"
        if not scale.is_file():
            return None
        content = json.loads(scale.read_text())
        devices = sorted({run["device"] for run in content["runs"].values()})
        return Duration(content["projection"]["seconds"], f"one {' / '.join(devices)}", shown(scale),
                        "its runs' iterations, each run measured, add up to")
    entry = measured(root).get(profile)
    return None if entry is None else Duration(entry["seconds"], entry["where"], entry["source"])


def suite_time(root: Path = ROOT) -> Duration:
    """How long the README's test command took in CI (profiles/measured.json's `tests`)."""
    entry = measured(root)["tests"]
    return Duration(entry["seconds"], entry["where"], entry["source"])


def measured(root: Path = ROOT) -> dict:
    path = root / MEASURED.relative_to(ROOT)
    return json.loads(path.read_text()) if path.is_file() else {}


def record_smoke(where: str, root: Path = ROOT) -> Duration:
    """Write the last smoke repro's span (outputs/smoke/metrics/timing/) into profiles/measured.json as `smoke`."""
    seconds = stage_span(root / "outputs/smoke/metrics/timing")
    if seconds is None:
        raise FileNotFoundError("outputs/smoke/metrics/timing/: no smoke repro here to measure (run "
                                "`python -m pipeline.profile smoke && dvc repro` first)")
    content = measured(root)
    source = "outputs/smoke/metrics/timing/*.json of `dvc repro` (python -m pipeline.durations smoke)"
    content["smoke"] = {"seconds": round(seconds, 1), "where": where, "source": source}
    (root / MEASURED.relative_to(ROOT)).write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
    return Duration(content["smoke"]["seconds"], where, content["smoke"]["source"])


def main(argv: list[str]) -> None:
    """`python -m pipeline.durations smoke [WHERE]`: record the last smoke repro (WHERE: the machine, default
    "a {cores}-core CPU"); without arguments, print every duration this module reads."""
    if argv[:1] == ["smoke"]:
        where = argv[1] if len(argv) > 1 else f"a {os.cpu_count()}-core CPU"
        print(f"smoke: {record_smoke(where).text()} ({shown(MEASURED)})")
        return
    for profile in ("default", "smoke", "paper"):
        duration = repro_time(profile)
        print(f"{profile}: {duration.text() if duration else 'not measured'}")
    print(f"tests: {suite_time().text()}")


if __name__ == "__main__":
    main(sys.argv[1:])
