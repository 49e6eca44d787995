"""Bad input stops the pipeline with one clear error naming the setting or file, before any work starts; each
setting has one source, and one typed schema (pipeline.params) checks the whole tree without importing torch."""

import copy
import subprocess
import sys

import pytest
import yaml

from cory.rl.config import CORYConfig, PPOConfig, TrainConfig
from cory.schema import ConfigError, from_dict
from pipeline.params import load_params
from pipeline.paths import ROOT
from pipeline.params import Params, deviations, validate
from pipeline.profile import render


@pytest.fixture(scope="module")
def default():
    return render("default")


@pytest.mark.parametrize("name", ["default", "smoke", "paper"])
def test_every_profile_renders_to_a_valid_tree(name):
    params = render(name)
    validate(params)
    assert params["profile"] == name


def committed_params_yaml() -> str:
    """params.yaml as git would commit it (the index), so that a working copy edited by `dvc exp run -S` or by hand
    does not fail this test; the file itself outside a git checkout."""
    staged = subprocess.run(["git", "show", ":params.yaml"], cwd=ROOT, capture_output=True, text=True)
    return staged.stdout if staged.returncode == 0 else (ROOT / "params.yaml").read_text()


def test_committed_params_yaml_is_the_default_profile(default):
    assert yaml.safe_load(committed_params_yaml()) == default


def test_an_edited_params_yaml_is_valid_params(tmp_path, default):
    """params.yaml is a working copy: the edit `dvc exp run -S train.ppo.learning_rate=2e-5` makes (DVC writes YAML
    1.2, `2e-05`, which YAML 1.1 reads as a string) is read like any params file, and nothing compares it with the
    profiles."""
    text = (ROOT / "params.yaml").read_text().replace("learning_rate: 1.41e-05", "learning_rate: 2e-05", 1)
    assert text != (ROOT / "params.yaml").read_text()
    path = tmp_path / "params.yaml"
    path.write_text(text)
    assert load_params(path).train.ppo.learning_rate == 2e-5


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(ConfigError, match=r"known profiles: default, paper, (paper_standins, )?smoke"):
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
        (lambda p: p.pop("report"), r"report: section missing"),
        (lambda p: p["data"]["imdb"].update(query_tokens=[8, 2]), r"data\.imdb\.query_tokens"),
        (lambda p: p["runtime"].update(workers="4"), r"runtime\.workers: must be an integer"),
        (lambda p: p["train"]["ppo"].update(samples_per_query=3), r"train\.ppo\.samples_per_query: must divide batch_size"),
        (lambda p: p["train"]["ppo"].update(samples_per_query=1, group_baseline=True),
         r"train\.ppo\.group_baseline: needs samples_per_query >= 2"),
        (lambda p: p["base_models"]["imdb_small"]["pretrain"].update(seq_len=512),
         r"base_models\.imdb_small\.pretrain\.seq_len: 512 tokens exceed the model's base_models\.imdb_small\.lm\.n_positions = 256"),
        (lambda p: p["reward_model"]["classifier"].update(max_length=1024),
         r"reward_model\.classifier\.max_length: 1024 tokens exceed the model's base_models\.imdb_small\.lm\.n_positions"),
        (lambda p: p["reward_model"].update(init_from="imdb_smal"), r"reward_model\.init_from: no base model 'imdb_smal'"),
        (lambda p: p["base_models"].update(reward=p["base_models"]["math"]),
         r"base_models\.reward: 'reward' is the reward model's name"),
        (lambda p: p["base_models"]["imdb_large"].update(compare_params_with="small"),
         r"base_models\.imdb_large\.compare_params_with: no base model 'small'"),
        (lambda p: p.update(train=None), r"train: must be a mapping, got NoneType"),
        (lambda p: p["data"].pop("math"), r"data: required setting\(s\) missing: math"),
        (lambda p: p.update(seeds=[]), r"seeds: must be a non-empty list"),
        (lambda p: p.update(profile="my-profile"), r"profile: must be a simple name"),
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
        f"error: {path}: train.ppo.learning_rat: unknown setting; did you mean 'learning_rate'?"
    ]


def test_a_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("profile: default\nseeds: [0, 1\nruntime: {workers: 1}\n")
    result = run_stage("pipeline.params", path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {path}:3:8: expected ',' or ']', but got ':' (while parsing a flow sequence at line 2)"
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("train:\n  ppo: {}\n\tcory: {}\n", r"params\.yaml:3:1: found character '\\t' that cannot start any token"),
        ("train: {iterations: 3}\ntrain: {samples_to_log: 2}\n", r"params\.yaml:2:1: 'train' appears twice"),
        ("- profile: default\n", r"params\.yaml: must hold a mapping of settings, got list"),
    ],
)
def test_params_file_errors_name_the_file(tmp_path, text, message):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_params(path)


def write_profiles(folder, overlay: str):
    folder.mkdir()
    (folder / "default.yaml").write_text((ROOT / "profiles" / "default.yaml").read_text())
    (folder / "mine.yaml").write_text(overlay)


@pytest.mark.parametrize(
    "overlay, message",
    [
        ("trian: {iterations: 3}\n", r"mine\.yaml: trian: unknown top-level setting"),
        ("train: {ppo: {lerning_rate: 0.1}}\n", r"mine\.yaml: train\.ppo\.lerning_rate: unknown setting; did you mean"),
        ("experiments: {imdb: {train: {ppo: {lerning_rate: 0.1}}}}\n",
         r"mine\.yaml: experiments\.imdb\.train\.ppo\.lerning_rate: unknown setting"),
        # Under a mapping of names validation accepts a new name, which would add a run, model or task of defaults.
        ("experiments: {imdb: {runs: {cory_no_tk: {train: {cory: {knowledge_transfer: false}}}}}}\n",
         r"mine\.yaml: experiments\.imdb\.runs\.cory_no_tk: no such entry in profiles/default\.yaml \(did you mean 'cory_no_kt'\?\)"),
        ("base_models: {imdb_smal: {lm: {n_layer: 1}}}\n", r"mine\.yaml: base_models\.imdb_smal: no such entry"),
        ("evaluation: {models: {cory_llm3: x}}\n", r"mine\.yaml: evaluation\.models\.cory_llm3: no such entry"),
        ("train:\n", r"mine\.yaml: train: must be a mapping, got NoneType"),  # an empty block, not "all defaults"
        ("profile: other\n", r"mine\.yaml: profile: set from the file's name"),
        ("seeds: [0\n", r"mine\.yaml:2:1: expected ',' or ']'"),
    ],
)
def test_profile_overlay_errors_name_the_key_and_the_file(tmp_path, monkeypatch, overlay, message):
    write_profiles(tmp_path / "profiles", overlay)
    monkeypatch.setattr("pipeline.profile.PROFILES", tmp_path / "profiles")
    with pytest.raises(ConfigError, match=message):
        render("mine")


def test_a_profile_may_set_settings_that_default_yaml_leaves_at_their_defaults(tmp_path, monkeypatch):
    write_profiles(tmp_path / "profiles", "data: {imdb: {max_reviews: 2000}}\nbase_models: {math: {samples: 2}}\n")
    monkeypatch.setattr("pipeline.profile.PROFILES", tmp_path / "profiles")
    params = render("mine")
    assert params["data"]["imdb"]["max_reviews"] == 2000 and params["base_models"]["math"]["samples"] == 2


def exists(tree, dotted: str) -> bool:
    """Whether a dotted path such as `experiments.math.train.ppo.batch_size` or `evaluation.ks[0]` is in `tree`."""
    node = tree
    for part in dotted.split("."):
        key, *indices = part.replace("]", "").split("[")
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
        for index in indices:
            if not isinstance(node, list) or int(index) >= len(node):
                return False
            node = node[int(index)]
    return True


@pytest.mark.parametrize(
    "dotted, bad",
    [
        ("train.ppo.mini_batch_size", 100),
        ("train.ppo.generation.top_p", 0.0),
        ("train.cory.role_exchange_period", 0),
        ("tasks.imdb.prompt_template", "no placeholder"),  # was named as experiments.imdb.runs.ppo.train.prompt_template
        ("tasks.math.observer_template", "{query} only"),
        ("experiments.math.train.ppo.batch_size", 0),  # was named as experiments.math.runs.ppo.train.ppo.batch_size
        ("experiments.pareto.train.ppo.adaptive_kl", "no"),  # was experiments.pareto.runs.ppo_eta0.01.train...
        ("experiments.imdb.runs.cory_no_kt.train.cory.knowledge_transfer", 0),
        ("data.math.generator.min_steps", 0),
        ("base_models.imdb_large.lm.n_head", 5),
        ("reward_model.classifier.epochs", 0),
        ("evaluation.ks", [1, 64]),
        ("runtime.workers", 0),
        ("base_models.imdb_small.pretrain.seq_len", 512),  # was "pretrain.seq_len", once the corpus was read
        ("reward_model.classifier.max_length", 1024),  # was "classifier.max_length", once the model was built
    ],
)
def test_errors_name_a_setting_path_that_exists(default, dotted, bad):
    params = copy.deepcopy(default)
    *parents, leaf = dotted.split(".")
    node = params
    for key in parents:
        node = node[key]
    node[leaf] = bad
    with pytest.raises(ConfigError) as caught:
        validate(params)
    named = str(caught.value).split(": ")[0]
    assert exists(default, named), f"{caught.value} names {named!r}, which is not in params.yaml"
    assert named.startswith(dotted.rsplit(".", 1)[0])


def test_train_stage_without_its_inputs_names_the_missing_file(tmp_path, default):
    params = copy.deepcopy(default)
    params["profile"] = "missing_inputs_test"
    params["runtime"]["device"] = "auto"  # the default profile's "cuda" would stop it first on a CPU machine
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    result = run_stage("pipeline.train", path)
    assert result.returncode == 1
    assert "outputs/missing_inputs_test/data/imdb/prompts.jsonl not found (run its data stage first)" in result.stderr
    assert "Traceback" not in result.stderr


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
def test_a_setting_that_would_be_overwritten_or_ignored_is_an_error_naming_it(default, dotted, value, message):
    params = copy.deepcopy(default)
    put(params, dotted, value)
    with pytest.raises(ConfigError, match=message):
        validate(params)


def test_a_hub_model_rejects_the_settings_of_a_scratch_model(default):
    params = copy.deepcopy(default)
    params["base_models"]["imdb_small"]["source"] = "gpt2-large"  # keeps default.yaml's lm and pretrain
    with pytest.raises(ConfigError, match=r"^base_models\.imdb_small\.lm: ignored: source 'gpt2-large' is loaded"):
        validate(params)
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
        (lambda p: p["experiments"]["imdb"]["runs"].update(cory_nokt=p["experiments"]["imdb"]["runs"].pop("cory_no_kt")),
         r"^experiments\.imdb\.runs\.cory_no_kt: missing; the report reads this run"),
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
def test_the_runs_the_report_reads_are_checked_against_params(default, edit, message):
    params = copy.deepcopy(default)
    edit(params)
    with pytest.raises(ConfigError, match=message):
        validate(params)


@pytest.mark.parametrize("dropped", [("pareto_math",), ("pareto", "pareto_math")])
def test_params_without_a_tasks_sweep_are_valid(default, dropped):
    """The report then says its frontier claim is not measurable (tests/test_report.py)."""
    params = copy.deepcopy(default)
    for group in dropped:
        params["experiments"].pop(group)
    validate(params)
    params["experiments"]["math"]["sweep_eta"] = [0.1]  # sweep_eta makes a group its task's sweep, whatever its name
    params["experiments"]["math"]["train"]["ppo"].pop("init_kl_coef")
    params["evaluation"]["models"] = {"base": "models/math", "ppo": "models/math", "cory_llm1": "models/math",
                                      "cory_llm2": "models/math"}
    with pytest.raises(ConfigError, match=r"^experiments\.math\.runs\.ppo: missing"):  # math/ppo is now ppo_eta0.1
        validate(params)


@pytest.mark.parametrize("name", ["default", "smoke", "paper"])
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
    assert sweep == expected
    assert experiments["pareto_math"]["task"] == "math" and experiments["pareto_math"]["save_models"] is False
    assert set(experiments["pareto_math"]["runs"]) == {"ppo", "cory"}


def test_the_default_math_sweep_runs_two_seeds_at_three_etas(default):
    tree = validate(default)
    sweep = tree.experiments["pareto_math"]
    assert sweep.seeds == [0] and sweep.sweep_eta == [0.01, 0.1, 0.3] and tree.seeds == [0, 1, 2]
    for group in ("math", "pareto_math"):  # one micro-batch of 128 (diagnostics.sh math-microbatch): 12 math runs at
        ppo = default["experiments"][group]["train"]["ppo"]  # once fit one H100 with the corpus vocabulary
        assert (ppo["mini_batch_size"], ppo["gradient_accumulation_steps"], ppo["speed"]["forward_batch_size"]) == (128, 1, 128)
    assert validate(render("paper")).experiments["pareto_math"].seeds is None  # the paper profile: every seed


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["experiments"]["pareto_math"].update(seeds=[0, 5]),
         r"^experiments\.pareto_math\.seeds: must be a subset of the top-level seeds \[0, 1, 2\]; \[5\] are not"),
        (lambda p: p["experiments"]["pareto_math"].update(seeds=[]), r"^experiments\.pareto_math\.seeds: must name"),
        (lambda p: p.update(seeds=[1, 2]),
         r"^experiments\.pareto_math\.seeds: must be a subset of the top-level seeds \[1, 2\]"),
        # pass@k evaluates each top-level seed's models: a group that trains fewer cannot be evaluated
        (lambda p: p["experiments"]["math"].update(seeds=[0, 1]),
         r"^evaluation\.models\.ppo: pass@k evaluates every seed of `seeds` \[0, 1, 2\], but group 'math' trains "
         r"\[0, 1\] only \(experiments\.math\.seeds\)"),
    ],
)
def test_a_groups_seeds_are_checked_against_the_top_level_seeds(default, edit, message):
    params = copy.deepcopy(default)
    edit(params)
    with pytest.raises(ConfigError, match=message):
        validate(params)


def test_params_of_a_side_experiment_without_the_reports_groups_are_valid(default):
    """tools/variants.py writes params with one group of its own: no report is made of them."""
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


def test_validating_params_imports_no_stage_module_and_no_torch():
    code = ("import sys, runpy; sys.argv = ['pipeline.params']; runpy.run_module('pipeline.params', run_name='__main__')"
            "\nheavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'matplotlib')"
            " or m in ('pipeline.train', 'pipeline.base_models', 'pipeline.reward_model', 'pipeline.evaluate',"
            " 'pipeline.report', 'pipeline.prepare_imdb', 'pipeline.prepare_math'))\nprint('heavy:', heavy)")
    env = {"CORY_PARAMS": str(ROOT / "params.yaml"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "params.yaml: every setting is valid" in result.stdout
    assert "heavy: []" in result.stdout, result.stdout
    timed = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipeline.params"], cwd=ROOT, env=env,
                           capture_output=True, text=True)
    assert timed.returncode == 0 and "| torch" not in timed.stderr and " pipeline.train" not in timed.stderr
