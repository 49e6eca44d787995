"""Every duration the README and the stop message state comes from the committed measurements (pipeline.durations),
so they cannot disagree: the quick start's first lines say which command to run with and without a GPU and how long
each takes on what, and the test command's duration stands beside it."""

import json
import re

import pytest

from pipeline import durations
from pipeline.paths import ROOT

README = (ROOT / "README.md").read_text()


def texts() -> dict[str, str]:
    return {"default": durations.repro_time("default").text(), "smoke": durations.repro_time("smoke").text(),
            "paper": durations.repro_time("paper").text(), "tests": durations.suite_time().text()}


def test_the_quick_starts_first_lines_say_what_to_run_with_and_without_a_gpu_and_how_long():
    first = README.split("```", 1)[0]
    said = texts()
    for name in ("default", "smoke", "tests"):
        assert said[name] in " ".join(first.split()), (name, said[name])
    assert "With an NVIDIA GPU" in first and "Without one" in first
    commands = README.split("```bash", 1)[1].split("```", 1)[0]
    assert said["tests"] in next(line for line in commands.splitlines() if line.startswith("python -m pytest"))
    smoke = README.split("```bash", 2)[2].split("```", 1)[0]
    assert "python -m pipeline.profile smoke && dvc repro" in smoke and said["smoke"] in smoke


def test_every_duration_the_readme_states_is_a_measured_one():
    said = texts()
    allowed = {re.match(r"[\d.]+ \w+", text).group(0) for text in said.values()}
    stated = set(re.findall(r"\b\d[\d.]* (?:minutes?|hours?|min|h)\b", " ".join(README.split())))
    assert stated <= allowed, stated - allowed
    assert said["default"] in " ".join(README.split()).split("## Results", 1)[1]  # the committed run's time


def test_the_default_profiles_time_is_its_reports():
    """REPORT.md's time table counts the committed run's stages the same way."""
    report = (ROOT / "reports/default/REPORT.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| **first process start to last end**"))
    assert float(row.split("|")[2]) == pytest.approx(durations.repro_time("default").seconds, abs=0.05)


def test_the_measured_file_says_what_each_number_is():
    content = json.loads(durations.MEASURED.read_text())
    assert set(content) == {"smoke", "tests"}
    for entry in content.values():
        assert set(entry) == {"seconds", "where", "source"} and entry["seconds"] > 0


def test_a_span_counts_the_report_only_where_it_ran_in_the_same_repro(tmp_path):
    def stage(name, process, start, end):
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {"stage": name, "process_started_at": process, "started_at": start, "finished_at": end, "seconds": 1}))

    stage("prepare", 100.0, 101.0, 110.0)
    stage("train", 111.0, 112.0, 200.0)
    stage("report", 205.0, 206.0, 215.0)
    assert durations.stage_span(tmp_path) == 115.0
    stage("report", 2000.0, 2001.0, 2010.0)  # made again later, alone
    assert durations.stage_span(tmp_path) == 100.0
    assert durations.stage_span(tmp_path / "missing") is None


def test_the_stop_message_of_a_gpu_profile_on_a_cpu_counts_its_runs_and_reads_the_measurements(monkeypatch):
    from cory.schema import ConfigError
    from pipeline import common
    from pipeline.params import validate
    from pipeline.profile import render

    monkeypatch.setattr(common, "driver_sees_gpu", lambda: False)
    said = texts()
    for profile in ("default", "paper"):
        params = validate(render(profile))
        runs = sum(len(jobs) for jobs in params.jobs.values())
        with pytest.raises(ConfigError) as error:
            common.require_device(params, computes=False)
        message = str(error.value)
        assert f"its {runs} RL runs" in message and said[profile] in message and said["smoke"] in message
        assert "python -m pipeline.profile smoke && dvc repro" in message
