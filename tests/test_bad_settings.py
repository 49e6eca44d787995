"""Bad settings are named before any expensive work, each in one line: a float setting that is not finite (checked
once, for every float-typed field, by cory.schema), lengths past a model's positions, prompt and problem counts a
batch or pass@k cannot be filled from, an evaluation too large for memory (pipeline/sizes.py), a missing model
folder, and a hub name with no network (found out in seconds, once: cory.hf.hub_reachable)."""

import copy
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace

import pytest

from cory.schema import ConfigError, dotted_leaves, from_dict
from pipeline.params import validate
from pipeline.paths import ROOT
from pipeline.profile import render
from smoke import clean_env


@pytest.fixture(scope="module")
def smoke():
    return render("smoke")


@pytest.fixture(scope="module")
def default():
    return render("default")


def edited(tree: dict, dotted: str, value) -> dict:
    tree = copy.deepcopy(tree)
    node, keys = tree, dotted.split(".")
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return tree


@dataclass
class Section:
    ratio: float = 1.0
    clip: float | None = None
    pair: tuple[float, float] = (0.9, 0.95)
    etas: list[float] = field(default_factory=list)
    by_name: dict[str, float] = field(default_factory=dict)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("written, named", [({"ratio": None}, "s.ratio"), ({"clip": None}, "s.clip"),
                                            ({"pair": [0.9, None]}, r"s.pair\[1\]"), ({"etas": [0.1, None]}, r"s.etas\[1\]"),
                                            ({"by_name": {"a": None}}, "s.by_name.a")])
def test_the_schema_refuses_a_non_finite_value_of_any_float_typed_field(written, named, value):
    def put(tree):
        if tree is None:
            return value
        if isinstance(tree, dict):
            return {k: put(v) for k, v in tree.items()}
        if isinstance(tree, list):
            return [put(v) for v in tree]
        return tree

    with pytest.raises(ConfigError, match=rf"^{named}: must be a finite number, got {value}"):
        from_dict(Section, put(written), "s")


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_every_float_setting_of_the_default_profile_must_be_finite(default, value):
    """.inf / .nan for temperature, cliprange, kl_target, learning_rate, vf_coef, ...: every float leaf of the
    default profile, each alone, is one error naming it."""
    leaves = [dotted for dotted, leaf in dotted_leaves(default).items() if isinstance(leaf, float)]
    assert {"train.ppo.learning_rate", "train.ppo.cliprange", "train.ppo.kl_target", "train.ppo.vf_coef",
            "train.ppo.generation.temperature"} <= set(leaves)
    for dotted in leaves:
        with pytest.raises(ConfigError, match=rf"^{dotted}: must be a finite number"):
            validate(edited(default, dotted, value))


@pytest.mark.parametrize("dotted, value, message", [
    ("train.ppo.generation.response_length", [4, 100000],
     r"^train\.ppo\.generation\.response_length: 100000 new tokens leave no room for a prompt in the model's 128 "
     r"positions \(base_models\.imdb_small\.lm\.n_positions; run imdb/ppo/seed0\)"),
    ("experiments.math.train.ppo.generation.response_length", [8, 256],
     r"^experiments\.math\.train\.ppo\.generation\.response_length: 256 new tokens .*\(base_models\.math\.lm\.n_positions"),
    ("evaluation.max_new_tokens", 256, r"^evaluation\.max_new_tokens: 256 new tokens leave no room .*evaluation\.models\.base"),
    ("data.imdb.max_rl_prompts", 4,
     r"^data\.imdb\.max_rl_prompts: 4 prompts cannot fill a batch of run imdb/ppo/seed0: it draws 8 distinct queries"),
    ("data.math.generator.n_rl", 0, r"^data\.math\.generator\.n_rl: 0 prompts cannot fill a batch of run math/"),
    ("data.math.generator.n_test", 0, r"^data\.math\.generator\.n_test: must be > 0"),
    ("evaluation.n_problems", 17, r"^evaluation\.n_problems: 17 problems asked, but data\.math\.generator\.n_test writes 16"),
    ("base_models.math.holdout", 300, r"^base_models\.math\.holdout: 300 held out leaves none of data\.math\.generator"),
    ("evaluation.n_samples", 10**9, r"^evaluation\.n_samples: 4 problems .* x 1000000000 samples .* = 3\.2e\+10 tokens, "
                                    r"past the 2\.68e\+08 one evaluation may hold in memory"),
    ("evaluation.n_samples", 1e9, r"^evaluation\.n_samples: must be an integer"),
])
def test_sizes_past_what_the_models_data_or_memory_allow_are_named(smoke, dotted, value, message):
    with pytest.raises(ConfigError, match=message):
        validate(edited(smoke, dotted, value))


def test_a_missing_model_folder_is_named_before_any_run_starts(tmp_path, monkeypatch):
    import pipeline.paths
    import pipeline.jobs as stage
    from pipeline.params import validate as typed

    params = render("smoke")
    params["tasks"]["math"]["model"] = str(tmp_path / "no" / "such" / "model")
    monkeypatch.setattr(pipeline.paths, "ROOT", tmp_path)
    tree = typed(params)
    (tmp_path / "outputs/smoke/data/math").mkdir(parents=True)
    (tmp_path / "outputs/smoke/data/math/rl.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n' * 8)
    with pytest.raises(FileNotFoundError, match=rf"^tasks\.math\.model: {tmp_path}/no/such/model: no such model folder"):
        stage.stage_jobs(tree, ["math"])


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_hub_name_with_no_network_fails_in_seconds_once(tmp_path):
    """Two loads of a hub name that is in no local cache, the hub unreachable (here: $HF_ENDPOINT a closed port):
    each one ConfigError naming the setting, both within seconds (transformers alone retries ~25 s per file), the
    hub asked once."""
    code = ("import time, transformers; from cory.hf import load_pretrained, _answers; start = time.perf_counter()\n"
            "for setting in ('base_models.imdb_small.source', 'tasks.imdb.model'):\n"
            "    try: load_pretrained(transformers.AutoConfig.from_pretrained, 'cory-tests/no-such-model', setting)\n"
            "    except Exception as exc: print(type(exc).__name__, exc)\n"
            "print('seconds', time.perf_counter() - start, 'asked', _answers.cache_info().misses)")
    env = clean_env(HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}", HF_HOME=str(tmp_path / "hf"))
    env.pop("HF_HUB_OFFLINE", None)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3, result.stdout + result.stderr[-2000:]
    for line, setting in zip(lines, ("base_models.imdb_small.source", "tasks.imdb.model")):
        assert line.startswith(f"ConfigError {setting}: 'cory-tests/no-such-model' is not a local folder, and the "
                               "Hugging Face hub is unreachable and the local cache does not hold it")
    seconds, asked = float(lines[2].split()[1]), int(lines[2].split()[3])
    assert seconds < 15 and asked == 1


def test_a_loaded_models_positions_are_checked_before_its_first_iteration(tmp_path):
    """A model validation cannot see into (a local folder, a hub model): the train stage reads its config.json before
    any run starts, and run_training checks the loaded model before its first iteration."""
    import pipeline.jobs as stage
    from cory.runs.run import check_positions
    from run_fixtures import job as make_job
    from tiny import tiny_lm, tiny_tokenizer

    folder = tmp_path / "model"
    tiny_lm(n_positions=16).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    from cory.runs.config import TaskConfig

    task = TaskConfig(model=str(folder), prompts=str(tmp_path / "prompts.jsonl"), reward="math")
    one = make_job(task, tmp_path, 1)
    one = replace(one, train=replace(one.train, ppo=replace(
        one.train.ppo, generation=replace(one.train.ppo.generation, response_length=(4, 16)))))
    with pytest.raises(ConfigError, match=r"^experiments\.g\.runs\.r: train\.ppo\.generation\.response_length: 16 new "
                                          r"tokens leave no room for a prompt in the 16 positions of "):
        stage.check_positions([one])
    with pytest.raises(ConfigError, match=r"^train\.ppo\.generation\.response_length: 16 new tokens .* \(run g/r/seed0\)"):
        check_positions(one, tiny_lm(n_positions=16))
    check_positions(one, tiny_lm(n_positions=17))


def test_a_stage_names_a_bad_setting_in_one_line_before_any_work(tmp_path, smoke):
    """Through a stage's entry point: one line, within seconds, nothing written."""
    import yaml

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(edited(smoke, "train.ppo.generation.temperature", float("nan"))))
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pipeline.prepare_imdb"], cwd=ROOT,
                            env={**clean_env(), "CORY_PARAMS": str(path)}, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: train.ppo.generation.temperature: must be a finite number, got nan"]
    assert time.perf_counter() - started < 60
