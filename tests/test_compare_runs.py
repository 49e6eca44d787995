"""tools.compare_runs: which runs of two outputs folders repeat each other exactly (timings aside)."""

from pathlib import Path

from tools.compare_runs import compare

HEADER = "iteration,timing/iteration,llm1/task_reward,llm1/kl\n"


def write_run(outputs: Path, run: str, rows: list[str]) -> None:
    folder = outputs / "runs" / run
    folder.mkdir(parents=True)
    (folder / "history.csv").write_text(HEADER + "".join(f"{row}\n" for row in rows))


def test_runs_repeat_unless_a_logged_value_differs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_run(a, "imdb/ppo/seed0", ["0,0.25,-0.2,0.0", "1,0.24,0.1,0.5"])
    write_run(b, "imdb/ppo/seed0", ["0,0.31,-0.2,0.0", "1,0.22,0.1,0.5"])  # only the timings differ
    write_run(a, "imdb/cory/seed0", ["0,0.25,-0.2,0.0", "1,0.24,0.1,0.5"])
    write_run(b, "imdb/cory/seed0", ["0,0.25,-0.2,0.0", "1,0.24,0.1,0.50000001"])
    write_run(a, "math/ppo/seed0", ["0,0.25,0.2,0.0", "1,0.24,0.3,0.5"])
    write_run(b, "math/ppo/seed0", ["0,0.25,0.2,0.0"])  # unfinished: compared over its one row
    write_run(a, "math/cory/seed0", ["0,0.25,0.2,0.0"])  # in one folder only: not compared
    assert compare(a, b) == [
        "imdb: 1 of 2 runs repeat exactly",
        "  imdb/cory/seed0: parts at row 1 of 2, llm1/kl: 0.5 vs 0.50000001",
        "math: 1 of 1 runs repeat exactly (1 of them over the iterations an unfinished one has: 1 of 2)",
    ]


def test_no_common_run_is_said(tmp_path):
    write_run(tmp_path / "a", "imdb/ppo/seed0", ["0,0.25,-0.2,0.0"])
    (tmp_path / "b" / "runs").mkdir(parents=True)
    assert compare(tmp_path / "a", tmp_path / "b") == [f"no run folder is in both {tmp_path / 'a'}/runs and "
                                                       f"{tmp_path / 'b'}/runs"]
