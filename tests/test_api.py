"""The library as a user meets it: `from cory import ...`, the reward contract, save and load, and no silent trap
(padding side, the observer's prompt, defaults that collapsed every IMDB group, a wrong batch or reward)."""

import copy
import subprocess
import sys

import pytest
import torch

import cory
from cory import (IMDB_OBSERVER_TEMPLATE, ConfigError, CORYConfig, GenerationConfig, PPOConfig, RewardError,
                  TrainConfig, Trainer)
from pipeline.paths import ROOT

from tiny import good_word_reward, tiny_lm, tiny_tokenizer

QUERIES = ["the movie", "the film was", "a plot", "not very"]


def config(n_agents: int = 2, **cory_settings) -> TrainConfig:
    ppo = PPOConfig(batch_size=4, mini_batch_size=4, ppo_epochs=1,
                    generation=GenerationConfig(response_length=(3, 3), repetition_penalty=1.0))
    cory_settings = {"observer_template": "{query} ->{response} ->", **cory_settings}
    return TrainConfig(iterations=2, ppo=ppo, cory=CORYConfig(n_agents=n_agents, **cory_settings))


def trainer(cfg: TrainConfig | None = None, reward=good_word_reward, tokenizer=None) -> Trainer:
    torch.manual_seed(0)
    return Trainer(cfg or config(), tiny_lm(), tokenizer or tiny_tokenizer(), reward)


# --------------------------------------------------------------------------------------------------------------------
# The public API
# --------------------------------------------------------------------------------------------------------------------


def test_the_public_names_import_from_cory_and_cory_rl_with_docstrings():
    from cory.rl import Trainer as RLTrainer

    assert RLTrainer is Trainer
    for name in cory.__all__:
        value = getattr(cory, name)
        assert name in dir(cory)
        if callable(value):
            assert (value.__doc__ or "").strip(), name
    assert "reward(queries, responses, answers)" in cory.RewardFn.__doc__ and "(B,)" in cory.RewardFn.__doc__
    with pytest.raises(AttributeError, match="no attribute 'Trainr'"):
        cory.Trainr  # noqa: B018


def test_importing_cory_or_its_config_imports_no_torch():
    code = "import sys, cory, cory.rl.config, pipeline.params; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_a_saved_agent_is_a_plain_transformers_folder_that_load_reads_back(tmp_path):
    from transformers import AutoModelForCausalLM

    t = trainer()
    t.step(QUERIES)
    folders = t.save(tmp_path / "trained")
    assert [f.name for f in folders] == ["llm1", "llm2"]
    plain = AutoModelForCausalLM.from_pretrained(folders[0])
    model, tokenizer = cory.load_agent(folders[1])
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None and not model.training
    for loaded, agent in ((plain, t.agents[0]), (model, t.agents[1])):
        trained = dict(agent.lm.named_parameters())
        assert all(torch.equal(p, trained[n]) for n, p in loaded.named_parameters())
    with pytest.raises(ConfigError, match=r"^model: .*no such local folder"):
        cory.load_agent(tmp_path / "missing" / "folder")


# --------------------------------------------------------------------------------------------------------------------
# No silent trap
# --------------------------------------------------------------------------------------------------------------------


def test_a_right_padding_tokenizer_samples_as_a_left_padding_one():
    right = tiny_tokenizer()
    right.padding_side = "right"
    runs = []
    for tokenizer in (tiny_tokenizer(), right):
        t = trainer(tokenizer=tokenizer)
        metrics = t.step(QUERIES)  # its sampling draws from the seed trainer() set
        runs.append((t.last_samples, {k: v for k, v in metrics.items() if not k.startswith("timing/")}))
    assert runs[0] == runs[1]
    assert right.padding_side == "right"  # the user's tokenizer is left as it was


def test_a_tokenizer_without_a_pad_token_is_one_error_naming_it():
    tokenizer = tiny_tokenizer()
    tokenizer.pad_token = None
    with pytest.raises(ConfigError, match=r"^tokenizer\.pad_token: .*tokenizer\.pad_token = tokenizer\.eos_token"):
        trainer(tokenizer=tokenizer)


def test_cory_without_an_observer_prompt_of_its_task_is_an_error_naming_the_setting():
    with pytest.raises(ConfigError, match=r"^train\.cory\.observer_template: required for CORY with knowledge"):
        trainer(config(observer_template=None))
    trainer(config(n_agents=1, observer_template=None))  # PPO has no observer
    trainer(config(observer_template=None, knowledge_transfer=False))  # the observer gets the pioneer's prompt
    assert CORYConfig().observer_template is None  # no task's prompt applied to another


def test_a_pipeline_task_without_its_observer_prompt_is_an_error_naming_the_task():
    from pipeline.params import validate
    from pipeline.profile import render

    params = copy.deepcopy(render("default"))
    del params["tasks"]["math"]["observer_template"]
    with pytest.raises(ConfigError, match=r"^tasks\.math\.observer_template: required for CORY with knowledge"):
        validate(params)


def test_the_library_defaults_are_the_measured_settings_and_the_papers_a_preset():
    default, paper = PPOConfig(), PPOConfig.paper()
    assert (default.kl_penalty, default.dropout, default.ratio_threshold_mode) == ("kl", "none", "skip")
    assert (paper.kl_penalty, paper.dropout, paper.ratio_threshold_mode) == ("full", "trl", "trl")
    assert TrainConfig.paper_imdb().cory.observer_template == IMDB_OBSERVER_TEMPLATE
    assert TrainConfig.paper_imdb(iterations=7).iterations == 7


def test_the_presets_are_what_the_profiles_run():
    """The measured defaults are the default profile's settings of those names; the paper preset is the paper
    profile's IMDB CORY run (speed settings aside)."""
    from dataclasses import asdict

    from pipeline.params import validate
    from pipeline.profile import render

    default_ppo = render("default")["train"]["ppo"]
    assert {k: default_ppo[k] for k in ("kl_penalty", "dropout", "ratio_threshold_mode")} == {
        k: getattr(PPOConfig(), k) for k in ("kl_penalty", "dropout", "ratio_threshold_mode")}
    run = next(job for job in validate(render("paper")).jobs["imdb"] if job.run == "cory")
    algorithm = lambda ppo: {k: v for k, v in asdict(ppo).items() if k not in ("speed", "generation")}  # noqa: E731
    assert algorithm(run.train.ppo) == algorithm(PPOConfig.paper())
    assert run.train.cory.observer_template == IMDB_OBSERVER_TEMPLATE


def test_the_profiles_set_every_setting_the_two_presets_disagree_on():
    """So that moving the library's defaults between the measured and the paper's settings changes no run of the
    pipeline: the profiles write each of those settings themselves."""
    from dataclasses import fields

    disagree = [f.name for f in fields(PPOConfig) if getattr(PPOConfig(), f.name) != getattr(PPOConfig.paper(), f.name)]
    assert disagree
    from pipeline.params import read_yaml
    from pipeline.profile import OverlayLoader

    default = read_yaml(ROOT / "profiles/default.yaml", OverlayLoader)["train"]["ppo"]
    paper = read_yaml(ROOT / "profiles/paper.yaml", OverlayLoader)["train"]["ppo"]
    assert [name for name in disagree if name not in default] == []
    assert [name for name in disagree if name not in paper and default[name] != getattr(PPOConfig.paper(), name)] == []


def test_a_batch_other_than_the_configs_is_one_line_before_any_work():
    calls = []
    t = trainer(reward=lambda q, r, a: calls.append(1) or good_word_reward(q, r, a))
    with pytest.raises(ValueError, match=r"^Trainer\.step: got 3 queries, expected ppo\.queries_per_batch = 4 "
                                         r"\(ppo\.batch_size 4\)$"):
        t.step(QUERIES[:3])
    with pytest.raises(ValueError, match=r"^Trainer\.step: got 2 answers for 4 queries"):
        t.step(QUERIES, answers=["1", "2"])
    with pytest.raises(ValueError, match=r"^Trainer\.step: queries must be a list of strings, got a str"):
        t.step("the movie")
    assert calls == [] and t.iteration == 0


@pytest.mark.parametrize("scores, came", [
    (lambda n: [0.5] * n, r"returned a list; expected a \(B,\) float tensor with B = 8"),
    (lambda n: torch.zeros(n, 1), r"returned a tensor of shape \(8, 1\); expected a \(B,\) float tensor with B = 8"),
    (lambda n: torch.zeros(n - 1), r"returned a tensor of shape \(7,\); expected a \(B,\) float tensor with B = 8"),
    (lambda n: torch.zeros(n, dtype=torch.bool), r"returned a tensor of torch\.bool"),
])
def test_a_reward_of_the_wrong_type_shape_or_length_is_one_line_before_the_update(scores, came):
    t = trainer(reward=lambda queries, responses, answers: scores(len(responses)))
    before = {n: p.clone() for n, p in t.agents[0].lm.named_parameters()}
    with pytest.raises(RewardError, match=r"^the task reward " + came):
        t.step(QUERIES)  # B = 2 roles x 4 responses: the trainer scores both roles in one call
    assert all(torch.equal(p, before[n]) for n, p in t.agents[0].lm.named_parameters())
    with pytest.raises(RewardError, match=r"^the task reward returned"):
        t.generate_alone(QUERIES[:2], None, iteration=0)


def test_an_integer_or_double_reward_is_taken_as_it_is():
    t = trainer(config(n_agents=1), reward=lambda q, responses, a: torch.ones(len(responses), dtype=torch.float64))
    assert t.step(QUERIES)["llm1/task_reward"] == 1.0
    t = trainer(config(n_agents=1), reward=lambda q, responses, a: torch.ones(len(responses), dtype=torch.long))
    assert t.step(QUERIES)["llm1/task_reward"] == 1.0
