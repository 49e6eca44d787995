"""lab.studies.variants: the params file of side-by-side variant runs (the diagnostics of lab/studies/diagnostics.sh)."""

import pytest

from cory.schema import ConfigError
from cory.runs.config import ExperimentConfig, TaskConfig, expand_jobs
from cory.schema import from_dict
from lab.studies.variants import GROUP, write


def test_variant_runs_take_the_groups_task_and_settings_plus_their_overrides(tmp_path):
    params = write("math", 7, [3], ["ppo=cory.n_agents=1", "ppo_k1=cory.n_agents=1,ppo.kl_penalty=kl,ppo.vf_coef=0"])
    assert list(params["experiments"]) == [GROUP]
    exp = from_dict(ExperimentConfig, params["experiments"][GROUP], f"experiments.{GROUP}")
    task = from_dict(TaskConfig, params["tasks"][exp.task], f"tasks.{exp.task}")
    jobs = {j.run: j for j in expand_jobs(GROUP, exp, task, params["train"], params["seeds"], tmp_path, tmp_path)}
    assert set(jobs) == {"ppo", "ppo_k1"} and all(j.seed == 3 and j.train.iterations == 7 for j in jobs.values())
    math_lr = params["experiments"][GROUP]["train"]["ppo"]["learning_rate"]  # the math group's own setting is kept
    assert jobs["ppo"].train.ppo.learning_rate == jobs["ppo_k1"].train.ppo.learning_rate == math_lr
    assert jobs["ppo_k1"].train.ppo.kl_penalty == "kl" and jobs["ppo_k1"].train.ppo.vf_coef == 0.0
    assert jobs["ppo"].train.ppo.vf_coef == 0.1


@pytest.mark.parametrize("group, run", [("nope", "a=ppo.vf_coef=0"), ("imdb", "no_settings")])
def test_bad_variant_arguments_are_named(group, run):
    with pytest.raises(ConfigError, match="--group|--run"):
        write(group, None, None, [run])
