"""lab/bench/usage_by_stage.py: the usage sampler's readings summed up stage by stage, from a device run's files."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readings_are_split_into_the_stages_and_the_time_before_each(tmp_path):
    usage = tmp_path / "usage.csv"
    rows = ["time,gpu_util,gpu_mem_mib,cpu_busy,cores"]
    rows += [f"{100 + t},{0 if t < 10 else 80},{0 if t < 10 else 2048},{10 if t < 10 else 50},16" for t in range(30)]
    rows.append("130,,,5,16")  # a second without a GPU reading is left out
    usage.write_text("\n".join(rows) + "\n")
    timing = tmp_path / "timing"
    timing.mkdir()
    (timing / "train.json").write_text(json.dumps({"stage": "train", "started_at": 110.0, "finished_at": 130.0}))
    (timing / "old.json").write_text(json.dumps({"stage": "old", "seconds": 3.0}))  # no clock times: skipped
    (timing / "report.json").write_text(json.dumps({"stage": "report", "started_at": 500.0, "finished_at": 505.0}))
    out = subprocess.run([sys.executable, "-m", "lab.bench.usage_by_stage", str(usage), str(timing), "--every", "10"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    before = next(text for text in out.splitlines() if "before train" in text)
    train = next(text for text in out.splitlines() if text.strip().startswith("train "))
    assert before.split()[2:4] == ["10", "s"] and "GPU   0.0% busy" in before and "cores  10.0% busy" in before
    assert train.split()[1:3] == ["20", "s"] and "GPU  80.0% busy,   2.0 GiB at most; cores  50.0% busy" in train
    assert "report  not sampled" in out and "old" not in out
    assert "0-10     GPU   0.0% busy" in out and "20-30     GPU  80.0% busy" in out
