"""Experiment groups -> runs: a group's own `seeds` (a subset of the top-level seeds) and its KL-coefficient sweep."""

from pathlib import Path

import pytest

from cory.schema import ConfigError, from_dict
from cory.runs.config import ExperimentConfig, TaskConfig, expand_jobs

TASK = TaskConfig(model="m", prompts="p.jsonl", reward="math", observer_template="{query} {response}")
RUNS = {"ppo": {"train": {"cory": {"n_agents": 1}}}, "cory": {}}


def group(**settings) -> ExperimentConfig:
    return from_dict(ExperimentConfig, {"task": "math", "runs": RUNS, **settings}, "experiments.sweep")


def jobs(exp: ExperimentConfig, seeds=(0, 1, 2)) -> list[tuple[str, int]]:
    return [(job.run, job.seed) for job in expand_jobs("sweep", exp, TASK, {}, list(seeds), Path("runs"))]


def test_a_group_runs_every_top_level_seed_unless_it_names_its_own():
    assert jobs(group()) == [(run, seed) for run in ("ppo", "cory") for seed in (0, 1, 2)]
    assert jobs(group(seeds=[0, 1])) == [(run, seed) for run in ("ppo", "cory") for seed in (0, 1)]
    assert group(seeds=[2]).seeds_of([0, 1, 2]) == [2] and group().seeds_of([0, 1, 2]) == [0, 1, 2]


def test_a_sweep_on_its_own_seeds_repeats_each_run_at_each_eta():
    found = jobs(group(sweep_eta=[0.01, 0.3], seeds=[1]))
    assert found == [("ppo_eta0.01", 1), ("ppo_eta0.3", 1), ("cory_eta0.01", 1), ("cory_eta0.3", 1)]
    exp = group(sweep_eta=[0.1], seeds=[0])
    assert {job.train.ppo.init_kl_coef for job in expand_jobs("sweep", exp, TASK, {}, [0, 1], Path("runs"))} == {0.1}


@pytest.mark.parametrize(
    "settings, seeds, message",
    [
        ({"seeds": [0, 3]}, (0, 1, 2),
         r"^experiments\.sweep\.seeds: must be a subset of the top-level seeds \[0, 1, 2\]; \[3\] are not among them"),
        ({"seeds": []}, (0, 1), r"^experiments\.sweep\.seeds: must name at least one seed"),
        ({"seeds": [1, 1]}, (0, 1), r"^experiments\.sweep\.seeds: must not repeat a seed"),
        ({"seeds": [0.5]}, (0, 1), r"^experiments\.sweep\.seeds\[0\]: must be an integer, got 0\.5"),
    ],
)
def test_a_groups_seeds_must_be_some_of_the_top_level_seeds(settings, seeds, message):
    with pytest.raises(ConfigError, match=message):
        jobs(group(**settings), seeds)
