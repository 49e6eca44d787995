"""lab.studies.calibration and lab.params_file: the calibration groups go into a valid params file beside the profile's
own, and dotted settings read as the benchmarks' --variant reads them."""

import yaml

from lab.params_file import dotted
from lab.studies.calibration import write
from pipeline.params import load_params


def test_the_calibration_groups_make_a_valid_params_file(tmp_path):
    params = write("/models/smollm2")
    assert {"cal_full", "cal_k1", "cal_smollm2"} <= set(params["experiments"])
    assert {0, 1, 2, 3} <= set(params["seeds"])
    runs = params["experiments"]["cal_smollm2"]["runs"]
    assert runs["ppo_full"]["train"]["cory"] == {"n_agents": 1} and runs["cory_full"]["model"] == "/models/smollm2"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    jobs = {(job.run, job.seed): job.train for job in load_params(tmp_path / "params.yaml").jobs["cal_k1"]}
    runs = ("ppo_lr4x", "cory_lr4x", "ppo_eta003", "cory_eta003")
    assert set(jobs) == {(run, seed) for run in runs for seed in (0, 1)}
    assert jobs["ppo_lr4x", 0].ppo.learning_rate == jobs["cory_lr4x", 1].ppo.learning_rate == 5.64e-5
    assert jobs["ppo_eta003", 0].cory.n_agents == 1 and jobs["cory_eta003", 0].cory.n_agents == 2
    assert jobs["cory_eta003", 0].ppo.batch_size == 256 and jobs["cory_eta003", 0].iterations == 100


def test_dotted_settings_nest_and_read_their_values_as_yaml():
    assert dotted("ppo.lam=1,ppo.speed.compile=false,,cory.observer_template='Better: {query}'") == {
        "ppo": {"lam": 1, "speed": {"compile": False}}, "cory": {"observer_template": "Better: {query}"}}
