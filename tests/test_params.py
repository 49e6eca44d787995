"""Bad input stops the pipeline with one clear error naming the setting or file, before any work starts; each
setting has one source, and one typed schema (pipeline.params) checks the whole tree without importing torch."""

import copy
import subprocess
import sys

import pytest
import yaml

from cory.rl.config import CORYConfig, PPOConfig, TrainConfig
from cory.schema import ConfigError, dotted_leaves, dotted_tree, from_dict
from pipeline.params import load_params
from pipeline.paths import ROOT
from pipeline.params import validate
from cory.report.config import ReportConfig
from pipeline.profile import render

from project_fixtures import default, full, write_profiles  # noqa: F401 (default, full: profiles' trees, fixtures)


@pytest.mark.parametrize("name", ["default", "full", "smoke", "paper"])
def test_every_profile_renders_to_a_valid_tree(name):
    params = render(name)
    validate(params)
    assert params["profile"] == name


def committed_params_yaml() -> str:
    """params.yaml as git would commit it (the index), so that a working copy edited by `dvc exp run -S` or by hand
    does not fail this test; the file itself outside a git checkout."""
    staged = subprocess.run(["git", "show", ":params.yaml"], cwd=ROOT, capture_output=True, text=True)
    return staged.stdout if staged.returncode == 0 else (ROOT / "params.yaml").read_text()


def test_the_authors_gsm8k_protocol_is_on_in_the_paper_profile_only():
    on = {name: validate(render(name)).evaluation.authors_protocol.enabled for name in ("default", "smoke", "paper")}
    assert on == {"default": False, "smoke": False, "paper": True}


def test_committed_params_yaml_is_the_default_profile(default):
    assert yaml.safe_load(committed_params_yaml()) == default


def test_an_edited_params_yaml_is_valid_params(tmp_path, default):
    """params.yaml is a working copy: the edit `dvc exp run -S train.ppo.learning_rate=2e-5` makes (DVC writes YAML
    1.2, `2e-05`, which YAML 1.1 reads as a string) is read like any params file, and nothing compares it with the
    profiles."""
    text = committed_params_yaml().replace("learning_rate: 1.41e-05", "learning_rate: 2e-05", 1)
    assert text != committed_params_yaml()
    path = tmp_path / "params.yaml"
    path.write_text(text)
    assert load_params(path).train.ppo.learning_rate == 2e-5


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(ConfigError, match=r"known profiles: default, full, paper, (paper_standins, )?smoke"):
        render("fast")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["train"]["ppo"].update(minibatch_size=4), r"train\.ppo\.minibatch_size: unknown setting; did you mean 'mini_batch_size'"),
        (lambda p: p["train"]["ppo"].update(mini_batch_size=100), r"train\.ppo\.mini_batch_size: .* must divide batch_size = 256"),
        (lambda p: p["train"]["ppo"].update(kl_penalty="reverse"), r"train\.ppo\.kl_penalty: must be one of"),
        (lambda p: p["train"]["cory"].update(role_exchange_period=0), r"train\.cory\.role_exchange_period: T_REx must be"),
        (lambda p: p["train"]["ppo"].update(vf_coef=-0.1), r"train\.ppo\.vf_coef: must be >= 0"),
        (lambda p: p["experiments"]["imdb"]["runs"]["cory"].update(train={"cory": {"n_agents": 3}}),
         r"experiments\.imdb\.runs\.cory\.train\.cory\.n_agents: must be one of \[1, 2\]"),
        (lambda p: p["experiments"]["imdb_smollm2"].update(task="gsm8k"),
         r"experiments\.imdb_smollm2\.task: unknown task 'gsm8k'"),
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
        (lambda p: p["evaluation"].update(authors_protocol={"enabled": True}),
         r"^evaluation\.authors_protocol\.enabled: the authors' protocol is GSM8K's .* data\.math\.source is 'generated'"),
        (lambda p: p["evaluation"].update(authors_protocol={"top_p": 1.5}), r"^evaluation\.authors_protocol\.top_p: must be in"),
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


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A copy of the repository for the stages below: what they write (a stage lock, outputs/<profile>/) stays there."""
    from smoke import copy_tracked

    return copy_tracked(tmp_path_factory.mktemp("stages") / "repo", "default", commit=False)


def run_stage(module: str, params_path, *args, cwd=ROOT) -> subprocess.CompletedProcess:
    env = {"CORY_PARAMS": str(params_path), "PATH": "/usr/bin:/bin", "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True)


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


@pytest.mark.parametrize(
    "overlay, message",
    [
        ("trian: {iterations: 3}\n", r"mine\.yaml: trian: unknown top-level setting"),
        ("train: {ppo: {lerning_rate: 0.1}}\n", r"mine\.yaml: train\.ppo\.lerning_rate: unknown setting; did you mean"),
        ("experiments: {imdb: {train: {ppo: {lerning_rate: 0.1}}}}\n",
         r"mine\.yaml: experiments\.imdb\.train\.ppo\.lerning_rate: unknown setting"),
        # Under a mapping of names validation accepts a new name, which would add a run, model or task of defaults.
        ("experiments: {imdb_smollm2: {runs: {cory_no_tk: {train: {cory: {knowledge_transfer: false}}}}}}\n",
         r"mine\.yaml: experiments\.imdb_smollm2\.runs\.cory_no_tk: no such entry in profiles/default\.yaml "
         r"\(did you mean 'cory_no_kt'\?\)"),
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
def test_errors_name_a_setting_path_that_exists(full, dotted, bad):
    """On the full profile, which has every kind of group (a sweep, the scratch ablations)."""
    params = copy.deepcopy(full)
    *parents, leaf = dotted.split(".")
    node = params
    for key in parents:
        node = node[key]
    node[leaf] = bad
    with pytest.raises(ConfigError) as caught:
        validate(params)
    named = str(caught.value).split(": ")[0]
    assert exists(full, named), f"{caught.value} names {named!r}, which is not in params.yaml"
    assert named.startswith(dotted.rsplit(".", 1)[0])


def test_train_stage_without_its_inputs_names_the_missing_file(tmp_path, default, repo):
    params = copy.deepcopy(default)
    params["profile"] = "missing_inputs_test"
    params["runtime"]["device"] = "auto"  # the default profile's "cuda" would stop it first on a CPU machine
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    result = run_stage("pipeline.train", path, cwd=repo)  # it gets past validation: in a copy, not the working tree
    assert result.returncode == 1
    assert "outputs/missing_inputs_test/data/imdb/prompts.jsonl not found (run its data stage first)" in result.stderr
    assert "Traceback" not in result.stderr
def smollm2_runs(p: dict, runs: tuple[str, ...]) -> None:
    """The default profile's SmolLM2 group with only `runs` of its own."""
    own = p["experiments"]["imdb_smollm2"]["runs"]
    p["experiments"]["imdb_smollm2"]["runs"] = {name: own[name] for name in runs}


MECHANISM_RUNS = ("ppo", "ppo_kl045", "ppo_kl07", "cory", "cory_kl045", "cory_no_kt")
"""The runs the default profile's report.mechanism compares."""


@pytest.mark.parametrize(
    "profile, edit, message",
    [
        ("default", lambda p: p["report"].update(imdb_groups=["imdb", "imdb_smol"]),
         r"^report\.imdb_groups: no experiment group 'imdb_smol' \(known: imdb, imdb_smollm2, math\)"),
        ("default", lambda p: p["report"].update(imdb_groups=["math"]),
         r"^report\.imdb_groups: group 'math' is no IMDB group: it trains task 'math' \(reward 'math'\)"),
        ("full", lambda p: p["report"].update(imdb_groups=["pareto"]),
         r"^report\.imdb_groups: group 'pareto' is no IMDB group: .* and sweeps the KL coefficient"),
        ("default", lambda p: p["report"].update(mechanism=None) or smollm2_runs(p, ("ppo", "cory_no_kt")),
         r"^experiments\.imdb_smollm2\.runs\.cory: missing; report\.imdb_groups lists this group"),
        # min_seeds applies where the report tests claims
        ("full", lambda p: p["experiments"]["pareto_math"].update(seeds=[0]),
         r"^experiments\.pareto_math\.seeds: group 'pareto_math' runs 1 seed\(s\) \[0\], and the report's claims "
         r"read it: an interval over seeds needs at least report\.min_seeds = 3"),
        ("default", lambda p: p["report"].update(min_seeds=6),
         r"^experiments\.imdb\.seeds: group 'imdb' runs 4 seed\(s\) \[0, 1, 2, 3\]"),
    ],
)
def test_the_report_settings_are_checked_against_the_groups(request, profile, edit, message):
    params = copy.deepcopy(request.getfixturevalue(profile))
    edit(params)
    with pytest.raises(ConfigError, match=message):
        validate(params)


def test_a_second_imdb_group_and_an_untested_profile_are_valid(default):
    params = copy.deepcopy(default)
    assert validate(params).report.imdb_groups == ("imdb", "imdb_smollm2")
    smollm2_runs(params, MECHANISM_RUNS)  # a group with some of the ablations is read as far as it goes
    validate(params)
    params["report"].update(min_seeds=6, test_claims=False)  # numbers without verdicts: no floor on the seeds
    validate(params)
    smoke = validate(render("smoke"))
    assert smoke.seeds == [0] and smoke.report.test_claims is False
    with pytest.raises(ConfigError, match=r"^experiments\.imdb\.seeds: group 'imdb' runs 1 seed\(s\) \[0\]"):
        validate({**render("smoke"), "report": {"min_seeds": 3}})
    assert ReportConfig().min_seeds == validate(default).report.min_seeds == 3




def test_dotted_settings_nest_into_the_tree_their_leaves_came_from():
    settings = ["ppo.lam=1", "ppo.speed.compile=regional", "", "ppo.generation.response_length=[4, 16]",
                "cory.observer_template='Better: {query}'"]
    tree = dotted_tree(settings)
    assert tree == {"ppo": {"lam": 1, "speed": {"compile": "regional"}, "generation": {"response_length": [4, 16]}},
                    "cory": {"observer_template": "Better: {query}"}}
    assert dotted_tree(f"{key}={yaml.safe_dump(value, default_flow_style=True).strip()}"
                       for key, value in dotted_leaves(tree).items()) == tree
