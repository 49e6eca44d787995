"""Bad input stops the pipeline with one clear error naming the setting or file, before any work starts."""

import copy
import subprocess
import sys

import pytest
import yaml

from cory.config import ConfigError, CORYConfig, PPOConfig, TrainConfig, from_dict
from pipeline.common import ROOT
from pipeline.params import validate
from pipeline.profile import render


@pytest.fixture(scope="module")
def default():
    return render("default")


@pytest.mark.parametrize("name", ["default", "smoke", "paper"])
def test_every_profile_renders_to_a_valid_tree(name):
    params = render(name)
    validate(params)
    assert params["profile"] == name


def test_committed_params_yaml_is_the_default_profile(default):
    assert yaml.safe_load((ROOT / "params.yaml").read_text()) == default


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(ConfigError, match="known profiles: default, paper, smoke"):
        render("fast")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["train"]["ppo"].update(minibatch_size=4), r"train\.ppo\.minibatch_size: unknown setting; did you mean 'mini_batch_size'"),
        (lambda p: p["train"]["ppo"].update(mini_batch_size=100), r"train\.ppo\.mini_batch_size: .* must divide batch_size = 128"),
        (lambda p: p["train"]["ppo"].update(kl_penalty="reverse"), r"train\.ppo\.kl_penalty: must be one of"),
        (lambda p: p["train"]["cory"].update(role_exchange_period=0), r"train\.cory\.role_exchange_period: T_REx must be"),
        (lambda p: p["train"]["ppo"].update(vf_coef=-0.1), r"train\.ppo\.vf_coef: must be >= 0"),
        (lambda p: p["experiments"]["imdb"]["runs"]["cory"].update(train={"cory": {"n_agents": 3}}),
         r"experiments\.imdb\.runs\.cory\.train\.cory\.n_agents: must be one of \[1, 2\]"),
        (lambda p: p["experiments"]["pareto"].update(task="gsm8k"), r"experiments\.pareto\.task: unknown task 'gsm8k'"),
        (lambda p: p.update(seeds=[0, 0]), r"seeds: must not repeat"),
        (lambda p: p.update(stages={}), r"stages: unknown top-level setting"),
        (lambda p: p["data"]["imdb"].update(query_tokens=[8, 2]), r"data\.imdb\.query_tokens"),
        (lambda p: p["runtime"].update(workers="4"), r"runtime\.workers: must be an integer"),
        (lambda p: p["train"]["ppo"].update(samples_per_query=3), r"train\.ppo\.samples_per_query: must divide batch_size"),
        (lambda p: p["train"]["ppo"].update(samples_per_query=1, group_baseline=True),
         r"train\.ppo\.group_baseline: needs samples_per_query >= 2"),
    ],
)
def test_bad_settings_raise_one_error_naming_them(default, edit, message):
    params = copy.deepcopy(default)
    edit(params)
    with pytest.raises(ConfigError, match=message):
        validate(params)


def test_trainer_config_checks_batch_arithmetic_and_estimators():
    with pytest.raises(ConfigError, match=r"ppo\.mini_batch_size"):
        PPOConfig(batch_size=256, mini_batch_size=100)
    with pytest.raises(ConfigError, match="gradient_accumulation_steps = 96"):
        PPOConfig(batch_size=32, mini_batch_size=2, gradient_accumulation_steps=48)
    with pytest.raises(ConfigError, match="unknown KL estimator"):
        PPOConfig(kl_penalty="forward")
    with pytest.raises(ConfigError, match="T_REx"):
        CORYConfig(role_exchange_period=-5)
    cfg = from_dict(TrainConfig, {"ppo": {"batch_size": 32, "mini_batch_size": 2, "gradient_accumulation_steps": 16}})
    assert cfg.ppo.backward_batch_size == 32 and cfg.ppo.optimizer_steps_per_epoch == 1


def run_stage(module: str, params_path, *args) -> subprocess.CompletedProcess:
    env = {"CORY_PARAMS": str(params_path), "PATH": "/usr/bin:/bin", "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_a_stage_with_a_typo_in_params_exits_with_one_line(tmp_path, default):
    params = copy.deepcopy(default)
    params["train"]["ppo"]["learning_rat"] = 1e-5
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    result = run_stage("pipeline.prepare_imdb", path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: params.yaml: train.ppo.learning_rat: unknown setting; did you mean 'learning_rate'?"
    ]


def test_train_stage_without_its_inputs_names_the_missing_file(tmp_path, default):
    params = copy.deepcopy(default)
    params["profile"] = "missing_inputs_test"
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    result = run_stage("pipeline.train", path)
    assert result.returncode == 1
    assert "outputs/missing_inputs_test/data/imdb/prompts.jsonl not found (run its data stage first)" in result.stderr
    assert "Traceback" not in result.stderr
