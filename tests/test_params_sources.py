"""One source per setting: what a run would overwrite or ignore is an error naming it; prose lives outside params;
validating params imports no torch."""

import copy
import subprocess
import sys

import pytest

from cory.schema import ConfigError
from pipeline.params import Params, deviations, validate
from pipeline.paths import ROOT
from pipeline.profile import render, write

from project_fixtures import default, full, write_profiles  # noqa: F401 (default, full: profiles' trees, fixtures)


# --------------------------------------------------------------------------------------------------------------------
# One source per setting: what a run would overwrite or ignore is an error naming it
# --------------------------------------------------------------------------------------------------------------------


def put(tree: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[leaf] = value


@pytest.mark.parametrize(
    "dotted, value, message",
    [
        # every run's seed comes from `seeds`: a train block's seed was silently replaced
        ("train.seed", 7, r"^train\.seed: set per run from the top-level `seeds`"),
        ("experiments.imdb.train.seed", 7, r"^experiments\.imdb\.train\.seed: set per run"),
        ("experiments.math.runs.cory.train.seed", 7, r"^experiments\.math\.runs\.cory\.train\.seed: set per run"),
        # the templates come from the run's task
        ("train.prompt_template", "Q: {query}", r"^train\.prompt_template: set per run from the task's prompt_template"),
        ("experiments.math.runs.ppo.train.prompt_template", "Q: {query}",
         r"^experiments\.math\.runs\.ppo\.train\.prompt_template: set per run from the task's"),
        ("train.cory.observer_template", "{query}{response}",
         r"^train\.cory\.observer_template: set per run from the task's observer_template"),
        ("experiments.imdb.runs.cory.train.cory.observer_template", "{query}{response}",
         r"^experiments\.imdb\.runs\.cory\.train\.cory\.observer_template: set per run from the task's"),
        # a sweep sets each run's KL coefficient
        ("experiments.pareto.train.ppo.init_kl_coef", 0.2,
         r"^experiments\.pareto\.train\.ppo\.init_kl_coef: set per run from the group's sweep_eta"),
        ("experiments.pareto.runs.cory.train.ppo.init_kl_coef", 0.2,
         r"^experiments\.pareto\.runs\.cory\.train\.ppo\.init_kl_coef: set per run from the group's sweep_eta"),
        # a PPO run trains one agent: its own CORY settings would do nothing
        ("experiments.imdb.runs.ppo.train.cory.role_exchange", False,
         r"^experiments\.imdb\.runs\.ppo\.train\.cory\.role_exchange: ignored: this run trains one agent"),
        # sections whose settings come from elsewhere
        ("evaluation.prompt_template", "Question: {query}\nAnswer:",
         r"^evaluation\.prompt_template: comes from tasks\.math\.prompt_template; remove it"),
        ("report.deviations", {"ppo.batch_size": "why"},
         r"^report\.deviations: comes from profiles/deviations\.yaml; remove it"),
        # settings that the chosen source does not read
        ("reward_model.tokenizer", "offline-gpt2", r"^reward_model\.tokenizer: ignored: the classifier starts from base"),
        ("reward_model.classifier.lm", {"n_layer": 1}, r"^reward_model\.classifier\.lm: ignored: the classifier starts"),
        ("data.math.gsm8k_path", "../shared/data/gsm8k", r"^data\.math\.gsm8k_path: ignored: source is 'generated'"),
        ("tasks.math.reward_model", "reward", r"^tasks\.math\.reward_model: ignored: the 'math' reward reads no model"),
    ],
)
def test_a_setting_that_would_be_overwritten_or_ignored_is_an_error_naming_it(full, dotted, value, message):
    """On the full profile, which has every kind of group (a sweep among them)."""
    params = copy.deepcopy(full)
    put(params, dotted, value)
    with pytest.raises(ConfigError, match=message):
        validate(params)


def test_a_hub_model_rejects_the_settings_of_a_scratch_model(default):
    params = copy.deepcopy(default)
    params["base_models"]["imdb_small"]["source"] = "gpt2-large"  # keeps default.yaml's lm and pretrain
    with pytest.raises(ConfigError, match=r"^base_models\.imdb_small\.lm, base_models\.imdb_small\.pretrain: ignored: "
                                          r"source 'gpt2-large' is loaded"):
        validate(params)  # both at once
    params = copy.deepcopy(default)
    params["reward_model"] = {"source": "lvwerra/distilbert-imdb", "init_from": None,
                              "classifier": {"max_length": 256, "epochs": 2.0}}
    with pytest.raises(ConfigError, match=r"^reward_model\.classifier\.epochs: ignored: source 'lvwerra"):
        validate(params)


def test_the_paper_profile_replaces_the_scratch_models_settings():
    paper = render("paper")
    assert paper["base_models"]["imdb_small"] == {"corpus": "imdb", "source": "gpt2-large"}
    assert "generator" not in paper["data"]["math"] and "tokenizer" not in paper["reward_model"]
    assert paper["data"]["imdb"]["validation_size"] == render("default")["data"]["imdb"]["validation_size"]  # merged


def test_a_replace_tag_in_an_overlay_replaces_the_block(tmp_path, monkeypatch):
    write_profiles(tmp_path / "profiles", "base_models:\n  math: !replace {corpus: math, source: gpt2, holdout: 10}\n")
    monkeypatch.setattr("pipeline.profile.PROFILES", tmp_path / "profiles")
    assert render("mine")["base_models"]["math"] == {"corpus": "math", "source": "gpt2", "holdout": 10}
    (tmp_path / "profiles" / "mine.yaml").write_text("base_models:\n  math: {source: gpt2, holdout: 10}\n")
    with pytest.raises(ConfigError, match=r"mine\.yaml: base_models\.math\.tokenizer|mine\.yaml: base_models\.math\.lm"):
        render("mine")  # merged: default.yaml's shape and pretraining of the scratch model stay, and nothing reads them


def test_the_evaluation_prompt_is_the_math_tasks_prompt(default):
    params = copy.deepcopy(default)
    assert validate(params).evaluation.prompt_template == params["tasks"]["math"]["prompt_template"]
    params["tasks"]["math"]["prompt_template"] = "Problem: {query}\nSolution:"
    assert validate(params).evaluation.prompt_template == "Problem: {query}\nSolution:"


def test_every_run_gets_its_templates_from_its_task_and_its_seed_from_seeds(default):
    tree = validate(default)
    assert isinstance(tree, Params) and tree.seeds == default["seeds"]
    from cory.runs.config import expand_jobs

    for group, exp in tree.experiments.items():
        task = tree.tasks[exp.task]
        jobs = expand_jobs(group, exp, task, default["train"], tree.seeds, ROOT / "runs")
        assert {(job.train.seed, job.train.prompt_template, job.train.cory.observer_template) for job in jobs} == {
            (seed, task.prompt_template, task.observer_template) for seed in exp.seeds_of(tree.seeds)}


@pytest.mark.parametrize(
    "folder, message",
    [
        ("checkpoints/math/ppo2/seed{seed}/llm1", r"group 'math' has no run 'ppo2' \(it has ppo, cory\)"),
        ("checkpoints/imdb/cory/seed{seed}/llm1", r"experiments\.imdb\.save_models is false"),
        ("checkpoints/math/ppo/seed{seed}/llm2", r"run math/ppo trains 1 agent\(s\), so it has no llm2"),
        ("checkpoints/maths/ppo/seed{seed}/llm1", r"no experiment group 'maths'"),
        ("models/math_base", r"no base model 'math_base'"),
        ("runs/math/ppo/seed{seed}/llm1", r"is no folder the pipeline writes"),
    ],
)
def test_evaluated_model_folders_are_checked_against_the_runs_params_define(default, folder, message):
    params = copy.deepcopy(default)
    params["evaluation"]["models"]["ppo"] = folder
    with pytest.raises(ConfigError, match=r"^evaluation\.models\.ppo: .*" + message):
        validate(params)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["experiments"]["imdb"]["runs"].update(cory1=p["experiments"]["imdb"]["runs"].pop("cory")),
         r"^experiments\.imdb\.runs\.cory: missing; the report reads this run"),
        (lambda p: p["experiments"]["imdb"]["runs"].update(ppo_2x={"model": "imdb_large"}),
         r"^experiments\.imdb\.runs\.ppo_2x: the report reads it as a PPO run, but it trains two agents"),
        (lambda p: p["experiments"].pop("math") and p["evaluation"]["models"].update(
            ppo="models/math", cory_llm1="models/math", cory_llm2="models/math"), r"^experiments\.math: missing"),
        (lambda p: p["experiments"]["pareto_math"]["runs"].pop("cory"),
         r"^experiments\.pareto_math\.runs\.cory: missing; the report's Fig\. 2c of task 'math' reads the sweep's"),
        (lambda p: p["experiments"]["pareto"]["runs"]["ppo"].update(train={}),
         r"^experiments\.pareto\.runs\.ppo: the report reads it as a PPO run, but it trains two agents"),
        (lambda p: p["experiments"]["pareto"].update(task="math"),
         r"^experiments\.pareto_math\.sweep_eta: experiments\.pareto sweeps task 'math' already"),
        (lambda p: p["evaluation"]["models"].pop("cory_llm2"), r"^evaluation\.models: needs cory_llm2"),
    ],
)
def test_the_runs_the_report_reads_are_checked_against_params(full, edit, message):
    """On the full profile: the report reads its sweeps too."""
    params = copy.deepcopy(full)
    edit(params)
    with pytest.raises(ConfigError, match=message):
        validate(params)


@pytest.mark.parametrize("dropped", [("pareto_math",), ("pareto", "pareto_math")])
def test_params_without_a_tasks_sweep_are_valid(full, dropped):
    """The report then says its frontier claim is not measurable (tests/test_report.py); the default profile has
    neither sweep."""
    params = copy.deepcopy(full)
    for group in dropped:
        params["experiments"].pop(group)
    validate(params)
    params["experiments"]["math"]["sweep_eta"] = [0.1]  # sweep_eta makes a group its task's sweep, whatever its name
    params["experiments"]["math"]["train"]["ppo"].pop("init_kl_coef")
    params["evaluation"]["models"] = {"base": "models/math", "ppo": "models/math", "cory_llm1": "models/math",
                                      "cory_llm2": "models/math"}
    with pytest.raises(ConfigError, match=r"^experiments\.math\.runs\.ppo: missing"):  # math/ppo is now ppo_eta0.1
        validate(params)


@pytest.mark.parametrize("name", ["full", "smoke", "paper"])
def test_the_math_sweep_trains_as_the_math_group_does_at_a_fixed_eta(name):
    """profiles write experiments.pareto_math.train out in full (a YAML alias would put anchors in params.yaml):
    it must stay the math group's train block, less the KL coefficient its sweep_eta sets, with adaptive_kl off, and
    without the probe (Fig. 2c reads the runs' final numbers; the probe only costs GPU time there)."""
    experiments = render(name)["experiments"]
    expected = copy.deepcopy(experiments["math"]["train"])
    expected["ppo"].pop("init_kl_coef", None)
    expected["ppo"]["adaptive_kl"] = False
    for probe in ("probe_every", "probe_queries", "probe_samples"):
        expected.pop(probe, None)
    sweep = copy.deepcopy(experiments["pareto_math"]["train"])
    assert sweep.pop("probe_every", 0) == 0
    assert sweep.pop("iterations") <= expected.pop("iterations")  # final values after convergence
    assert sweep == expected
    assert experiments["pareto_math"]["task"] == "math" and experiments["pareto_math"]["save_models"] is False
    assert set(experiments["pareto_math"]["runs"]) == {"ppo", "cory"}


def test_the_default_profile_spends_its_seeds_on_the_mechanism_experiment(default, full):
    """6 seeds for the SmolLM2 mechanism experiment (the decision rule's signed-rank test decides a direction from 6
    pairs), 4 for the scratch IMDB sanity check, 3 for math and the full profile's sweeps (the report's floor,
    report.min_seeds)."""
    tree = validate(default)
    assert tree.seeds == [0, 1, 2, 3, 4, 5] and tree.experiments["imdb_smollm2"].seeds == tree.seeds
    assert tree.experiments["imdb"].seeds == [0, 1, 2, 3]
    assert tree.experiments["math"].seeds == [0, 1, 2] and tree.report.min_seeds == 3
    assert set(tree.experiments) == {"imdb", "imdb_smollm2", "math"}
    swept = validate(full).experiments
    assert swept["pareto"].seeds == swept["pareto_math"].seeds == [0, 1, 2]
    assert swept["pareto_math"].sweep_eta == [0.01, 0.3]
    for profile, group in ((default, "math"), (full, "pareto_math")):  # one micro-batch of 128 (the math micro-batch
        ppo = profile["experiments"][group]["train"]["ppo"]  # diagnostics): 12 math runs at once fit one H100 with
        assert (ppo["mini_batch_size"], ppo["gradient_accumulation_steps"],  # the corpus vocabulary
                ppo["speed"]["forward_batch_size"]) == (128, 1, 128)
    assert validate(render("paper")).experiments["pareto_math"].seeds is None  # the paper profile: every seed


def math_copy_with_seeds(p: dict, seeds: list[int]) -> None:
    """A second math group training `seeds`, whose CORY-LLM2 pass@k evaluates."""
    p["experiments"]["math2"] = {**copy.deepcopy(p["experiments"]["math"]), "seeds": seeds}
    p["evaluation"]["models"]["cory_llm2"] = "checkpoints/math2/cory/seed{seed}/llm2"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["experiments"]["math"].update(seeds=[0, 7]),
         r"^experiments\.math\.seeds: must be a subset of the top-level seeds \[0, 1, 2, 3, 4, 5\]; \[7\] are not"),
        (lambda p: p["experiments"]["math"].update(seeds=[]), r"^experiments\.math\.seeds: must name"),
        (lambda p: p.update(seeds=[1, 2]),
         r"^experiments\.\w+\.seeds: must be a subset of the top-level seeds \[1, 2\]"),
        # pass@k evaluates one set of seeds: every group it reads models of must train them
        (lambda p: math_copy_with_seeds(p, [0, 1]),
         r"^evaluation\.models\.cory_llm2: pass@k evaluates the seeds \[0, 1, 2\] of the first group "
         r"evaluation\.models names, but group 'math2' trains \[0, 1\] \(experiments\.math2\.seeds\)"),
    ],
)
def test_a_groups_seeds_are_checked_against_the_top_level_seeds(default, edit, message):
    params = copy.deepcopy(default)
    edit(params)
    with pytest.raises(ConfigError, match=message):
        validate(params)


def test_params_of_a_side_experiment_without_the_reports_groups_are_valid(default):
    """A params file of side-by-side variant runs, in a group of their own: no report is made of them."""
    params = copy.deepcopy(default)
    params["experiments"] = {"variants": {**params["experiments"]["math"], "runs": {"a": {}, "b": {}}}}
    params["evaluation"]["models"] = {"base": "models/math", "a": "checkpoints/variants/a/seed{seed}/llm1"}
    validate(params)


# --------------------------------------------------------------------------------------------------------------------
# Prose lives outside params; validation imports no torch
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "smoke", "paper"])
def test_params_hold_no_prose_and_the_report_reads_its_deviations_from_a_file(name):
    params = render(name)
    assert "deviations" not in params["report"]
    cfg = validate(params).report
    assert cfg.deviations == deviations(name) and cfg.deviations
    assert all(isinstance(why, str) and len(why) > 40 for why in cfg.deviations.values())


def test_deviations_name_existing_profiles(tmp_path):
    (tmp_path / "default.yaml").write_text("{}\n")
    path = tmp_path / "deviations.yaml"
    path.write_text("default: {ppo.batch_size: because}\ndefualt: {x: y}\n")
    with pytest.raises(ConfigError, match=r"deviations\.yaml: defualt: no such profile"):
        deviations("default", path)
    path.write_text("default: {ppo.batch_size: [not, text]}\n")
    with pytest.raises(ConfigError, match=r"deviations\.yaml: default: must map settings to the text"):
        deviations("default", path)


def test_validating_params_imports_no_stage_module_and_no_torch(tmp_path):
    code = ("import sys, runpy; sys.argv = ['pipeline.params']; runpy.run_module('pipeline.params', run_name='__main__')"
            "\nheavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'matplotlib')"
            " or m in ('pipeline.train', 'pipeline.base_models', 'pipeline.reward_model', 'pipeline.evaluate',"
            " 'pipeline.report', 'pipeline.prepare_imdb', 'pipeline.prepare_math'))\nprint('heavy:', heavy)")
    params = tmp_path / "params.yaml"  # the default profile, whatever the working copy's params.yaml holds
    write("default", params)
    env = {"CORY_PARAMS": str(params), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "params.yaml: every setting is valid" in result.stdout
    assert "heavy: []" in result.stdout, result.stdout
    timed = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipeline.params"], cwd=ROOT, env=env,
                           capture_output=True, text=True)
    assert timed.returncode == 0 and "| torch" not in timed.stderr and " pipeline.train" not in timed.stderr
