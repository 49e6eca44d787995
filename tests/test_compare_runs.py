"""tools.compare_runs: which runs of two outputs folders repeat each other exactly (timings aside)."""

from pathlib import Path

from tools.compare_runs import compare, compare_finals

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


def test_finals_compare_each_runs_seed_means_by_welchs_t(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for seed, (ours, theirs) in enumerate([(1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]):
        # two iterations each; the final value averages the last one only (last_n=1)
        write_run(a, f"imdb/ppo/seed{seed}", ["0,0.1,9.0,9.0", f"1,0.1,{ours},{ours * 10}"])
        write_run(b, f"imdb/ppo/seed{seed}", ["0,0.1,9.0,9.0", f"1,0.1,{theirs},{ours * 10}"])
    write_run(a, "imdb/cory/seed0", ["0,0.1,1.0,1.0"])  # in one folder only: not compared
    lines = compare_finals(a, b, last_n=1)
    # means 2 and 3, each side's variance 1 over 3 seeds: t = -1 / sqrt(2/3); the KL is the same on both sides
    assert lines[1] == "  imdb/ppo llm1 (3 / 3 seeds): task reward 2 / 3, -1, t -1.22; KL 20 / 20, +0, t +0.00"
    assert lines[-1] == "largest |t|: 1.22 (imdb/ppo llm1 task reward) of 2; |t| > 2 in 0"
    assert len(lines) == 3
    # over both iterations the first one's 9.0 weighs in on both sides alike
    assert compare_finals(a, b, last_n=2)[1].startswith("  imdb/ppo llm1 (3 / 3 seeds): task reward 5.5 / 6, -0.5,")
