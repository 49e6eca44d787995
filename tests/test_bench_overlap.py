"""scripts/bench_overlap.py on a tiny GPT-2 Large stand-in (CPU): both ways of running the two agents' updates run,
and every timing it reports is there."""

from scripts import bench_overlap


def test_both_updates_one_after_the_other_and_at_once_on_a_tiny_standin(capsys):
    times = bench_overlap.measure(scale="tiny", device="cpu", repeats=1, response=4, batch=4)
    assert set(times) == {"sequential", "concurrent", "pioneer alone", "observer alone"}
    assert all(len(values) == 1 and values[0] > 0 for values in times.values())
    out = capsys.readouterr().out
    assert "pioneer rollout (4, " in out and "concurrent: mean" in out
