"""benchmark/rl.py's run builder (CPU): a --variant changes the run's resolved settings, including those its
experiment group sets, and the math run gets math problems its corpus vocabulary tokenizes without bytes."""

from pathlib import Path

from benchmark.rl import build

REPO = Path(__file__).resolve().parents[1]


def test_a_variant_changes_a_setting_the_group_sets(tmp_path, monkeypatch):
    from benchmark.common import profile_params

    # the default profile, whatever the working copy's params.yaml holds
    monkeypatch.setenv("CORY_PARAMS", str(profile_params("default", tmp_path)))
    variant = "ppo.mini_batch_size=128,ppo.gradient_accumulation_steps=1,ppo.generation.cache=dynamic"
    cfg, lm, tokenizer, reward, queries, answers = build("math", "cory", tmp_path, variant)
    assert (cfg.ppo.mini_batch_size, cfg.ppo.gradient_accumulation_steps, cfg.ppo.generation.cache) == (128, 1, "dynamic")
    assert cfg.iterations == 100 and cfg.ppo.samples_per_query == 8  # the group's other settings stay
    assert len(queries) == len(answers) == cfg.ppo.queries_per_batch
    # The observer's prompt holds the query, the pioneer's 80 tokens and the template's words; with its own 80 tokens
    # it stays within the model's 256 positions (IMDB-like word openings split into bytes here and did not).
    longest = max(len(tokenizer(q).input_ids) for q in queries)
    assert longest + 2 * 80 + 16 < lm.config.n_positions, longest
    default, *_ = build("math", "cory", tmp_path, "")
    assert (default.ppo.mini_batch_size, default.ppo.generation.cache) != (128, "dynamic")


class CountingBarrier:
    def __init__(self):
        self.waits = 0

    def wait(self):
        self.waits += 1


def test_concurrent_processes_start_their_timed_iterations_together(tmp_path, monkeypatch):
    """Each process waits twice: once its models are built, and once its warm-up (where compilations happen, each of
    its own length) is over, so that the processes' timed iterations run side by side and none is timed partly alone
    (which once made a compiled variant look 2.1x faster instead of 1.17x)."""
    from benchmark.rl import time_iterations
    from benchmark.common import profile_params

    monkeypatch.setenv("CORY_PARAMS", str(profile_params("smoke", tmp_path)))
    barrier = CountingBarrier()
    result = time_iterations("math", "ppo", iterations=1, warmup=1, barrier=barrier)
    assert barrier.waits == 2
    assert result["wall_per_iteration"] > 0 and result["warmup_seconds"] > 0
