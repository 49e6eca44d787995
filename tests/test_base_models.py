"""The base_models stage on tiny models and data: a loadable model with its metrics and samples, models whose inputs
are unchanged kept, the reward model right after the base model it starts from (in that model's process on a GPU),
the math model on formatted problems and on the corpus vocabulary, and the errors that name what is missing."""

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from project_fixtures import project  # noqa: F401 (a profile of toy data and tiny models, a fixture)
from tiny import tok  # noqa: F401 (the tiny tokenizer the project fixture uses)
import torch
from cory.schema import ConfigError, from_dict
from cory.tracking.runs import FinishedRun


# --------------------------------------------------------------------------------------------------------------------
# The stages, on tiny models and data
# --------------------------------------------------------------------------------------------------------------------


def test_base_model_stage_writes_a_loadable_model_metrics_and_samples(project):
    from pipeline.base_models import build_base_model
    from pipeline.paths import out_dir

    small = project.base_models["imdb_small"]
    metrics, record, samples = build_base_model("imdb_small", small, project, "cpu")
    assert metrics["steps"] == 4 and metrics["val_perplexity"] > 1 and "param_ratio" not in metrics
    # where its time went: the parts are inside the whole, and the whole is inside the function's own wall time
    parts = [metrics[k] for k in ("prepare_seconds", "first_step_seconds", "eval_seconds")]
    assert all(part >= 0 for part in parts) and sum(parts) <= metrics["total_seconds"]
    assert metrics["save_seconds"] >= 0 and metrics["sample_seconds"] >= 0
    assert [row["step"] for row in record["history"]] == [2, 4]
    assert [s["prompt"] for s in samples] == ["This is one of Jackies", "I find it hard to believe"]
    model_dir = out_dir(project, "models", "imdb_small")
    assert AutoModelForCausalLM.from_pretrained(model_dir).num_parameters() == metrics["params"]
    assert (model_dir / "training.json").is_file()

    large = project.base_models["imdb_large"]
    metrics_large, _, _ = build_base_model("imdb_large", large, project, "cpu")
    assert metrics_large["param_ratio"] == pytest.approx(metrics_large["params"] / metrics["params"])
    assert metrics_large["param_ratio"] > 1.2


def test_base_models_stage_keeps_the_models_whose_inputs_are_unchanged(project, tmp_path, monkeypatch):
    import pipeline.base_models as stage
    from pipeline.common import write_jsonl
    from pipeline.units import content_digest
    from pipeline.paths import out_dir

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    code = {"base": "the stage's code", "reward": "the reward model's code"}
    # no dvc.yaml in this project: the base models' code leaves the reward model's out
    monkeypatch.setattr(stage, "code_digest", lambda name, leave_out=(): code["base"] + (code["reward"] * (not leave_out)))
    names = list(project["base_models"]) + ["reward"]

    def current():
        content_digest.cache_clear()  # one stage process hashes each corpus once; here the corpus changes in between
        digests = stage.fingerprints(names, project)
        return digests, {name for name, digest in digests.items() if stage.current(name, project, digest)}

    digests, kept = current()
    assert kept == set() and list(digests) == names  # the reward model after the base model it starts from
    assert stage.train_all(digests, project) == {}  # on a CPU: one after another, in this process
    assert current()[1] == set(names)
    for kind in ("metrics", "samples"):
        assert out_dir(project, kind, "base_models", "math.json").is_file()
    assert json.loads(out_dir(project, "metrics", "reward_model.json").read_text())["seconds"] > 0
    # another math corpus: only the math model is stale
    from cory.tasks.config import MathGenConfig
    from cory.tasks.mathgen import generate_problems
    write_jsonl(out_dir(project, "data", "math", "pretrain.jsonl"),
                generate_problems(MathGenConfig(n_pretrain=20, n_rl=0, n_test=0, seed=1))["pretrain"])
    assert current()[1] == {"imdb_small", "imdb_large", "reward"}
    # the reward model's settings or its own code: only the reward model
    project["reward_model"]["classifier"]["epochs"] = 2
    assert current()[1] == {"imdb_small", "imdb_large"}
    project["reward_model"]["classifier"]["epochs"] = 3
    code["reward"] = "the reward model's new code"
    assert current()[1] == {"imdb_small", "imdb_large"}
    code["reward"] = "the reward model's code"
    # imdb_small's shape: itself, imdb_large, whose parameter ratio is against it, and the reward model it starts
    project["base_models"]["imdb_small"]["lm"] = {**project["base_models"]["imdb_small"]["lm"], "n_embd": 16}
    assert current()[1] == set()
    # a model folder without its metrics (a stage killed between the two) is not current
    project["base_models"]["imdb_small"]["lm"]["n_embd"] = 32
    out_dir(project, "metrics", "base_models", "imdb_small.json").unlink()
    assert current()[1] == {"imdb_large", "reward"}
    out_dir(project, "metrics", "reward_model.json").unlink()
    assert current()[1] == {"imdb_large"}


def test_the_reward_model_does_not_run_when_its_base_model_failed(project, tmp_path, monkeypatch):
    import pipeline.base_models as stage

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setattr(stage, "code_digest", lambda name, leave_out=(): "code")
    calls = []

    def fails(name, digest, params):
        raise FloatingPointError("non-finite loss")

    monkeypatch.setattr(stage, "train_one", fails)
    monkeypatch.setattr(stage.reward, "train_reward", lambda *args: calls.append(args))
    failed = stage.train_all(stage.fingerprints(["imdb_small", "reward"], project), project)
    assert set(failed) == {"imdb_small", "reward"} and failed["reward"] == "not run: imdb_small failed" and calls == []


def test_on_a_gpu_the_reward_model_trains_in_its_base_models_process_after_it(project, monkeypatch, capsys):
    """Each turn is one worker's call (threads here): the reward model right after imdb_small, in the same worker, the
    other models beside them; a failure of either is named, and the reward model does not run after imdb_small's."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import pipeline.base_models as stage
    import pipeline.gpus as gpus

    monkeypatch.setattr(stage, "code_digest", lambda name, leave_out=(): "code")
    project["runtime"] = {"mps": False}
    monkeypatch.setattr(stage, "device", lambda: "cuda")
    monkeypatch.setattr(stage, "visible_gpus", lambda: ["0"])
    monkeypatch.setattr(stage, "warm_up", lambda profile: None)
    monkeypatch.setattr(gpus, "worker_pool", lambda processes, names: ThreadPoolExecutor(processes))
    ran, fail, logged = [], set(), []
    monkeypatch.setattr(stage, "log_finished", lambda run, profile: logged.append((run.stage, run.status,
                                                                                 threading.get_ident())))

    def unit(name):
        ran.append((name, threading.get_ident()))
        if name in fail:
            raise FloatingPointError(f"non-finite loss ({name})")
        return FinishedRun(stage.unit_stage(name), {}, "out", 0.0, 1.0)

    monkeypatch.setattr(stage, "train_one", lambda name, digest, params: unit(name))
    monkeypatch.setattr(stage.reward, "train_reward", lambda digest, params: unit("reward"))
    todo = stage.fingerprints(list(project["base_models"]) + ["reward"], project)
    assert [[name for name, _ in units] for units in stage.in_turns(todo, project)] == [
        ["imdb_small", "reward"], ["imdb_large"], ["math"]]
    assert stage.train_all(todo, project) == {}
    thread = dict(ran)
    assert len(ran) == 4 and thread["reward"] == thread["imdb_small"]
    assert [name for name, _ in ran].index("reward") > [name for name, _ in ran].index("imdb_small")
    # every model's MLflow run, logged by the stage's own thread (the workers import no MLflow)
    main = threading.get_ident()
    assert sorted(logged) == sorted((stage.unit_stage(name), "FINISHED", main) for name in thread)
    ran.clear(), logged.clear(), fail.add("reward")
    assert stage.train_all(todo, project) == {"reward": "FloatingPointError: non-finite loss (reward)"}
    assert ("reward_model", "FAILED", main) in logged and len(logged) == 4
    ran.clear(), logged.clear(), fail.update({"imdb_small"})
    assert stage.train_all(todo, project) == {"imdb_small": "FloatingPointError: non-finite loss (imdb_small)",
                                             "reward": "not run: imdb_small failed"}
    assert "reward" not in dict(ran)
    assert sorted(status for name, status, _ in logged) == ["FAILED", "FINISHED", "FINISHED"]  # not run: no run
    # the reward model alone, when imdb_small is current: a turn of its own
    assert stage.in_turns({"reward": todo["reward"], "math": todo["math"]}, project) == [
        [("reward", todo["reward"])], [("math", todo["math"])]]


def test_math_base_model_trains_on_formatted_problems_with_a_holdout(project):
    from pipeline.base_models import build_base_model, corpus_texts

    cfg = project.base_models["math"]
    train, validation, prompts = corpus_texts("math", cfg, project)
    assert len(validation) == 4 and len(train) >= 16
    assert all(text.startswith("Question: ") and "\nAnswer: " in text and "####" in text for text in validation)
    assert all(p.startswith("Question: ") and p.endswith("\nAnswer:") for p in prompts)
    assert not set(validation) & set(train)
    metrics, _, samples = build_base_model("math", cfg, project, "cpu")
    assert metrics["val_loss"] > 0 and len(samples) == 2


def test_corpus_vocabulary_tokenizes_its_corpus_as_gpt2_does_with_fewer_ids(tmp_path):
    from cory.tasks.config import MathGenConfig
    from cory.tasks.mathgen import generate_problems, pretraining_texts
    from cory.tasks.tokenizer import corpus_vocabulary, load_tokenizer

    texts = pretraining_texts(generate_problems(MathGenConfig(n_pretrain=200, n_rl=0, n_test=0))["pretrain"],
                              slip_rate=0.5)
    small, full = corpus_vocabulary(texts), load_tokenizer()
    assert 256 < len(small) < 5000

    def pieces(tokenizer, text):
        return tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])

    assert all(pieces(small, text) == pieces(full, text) for text in texts)
    unseen = "Zoë paid 12345 ¥ for 3 crêpes!"  # pieces the corpus never had: longer ones, down to bytes, still exact
    assert small.decode(small(unseen)["input_ids"]) == unseen and len(small(unseen)["input_ids"]) > len(full(unseen)["input_ids"])
    assert small.eos_token == full.eos_token and small.eos_token_id == len(small) - 1
    assert small.pad_token_id == small.eos_token_id and small.padding_side == "left"
    small.save_pretrained(tmp_path / "tok")  # as the base-model stage saves it beside the model; the RL stage loads it
    again = load_tokenizer(str(tmp_path / "tok"))
    assert len(again) == len(small) and again(texts[:5])["input_ids"] == small(texts[:5])["input_ids"]


def test_math_base_model_on_the_corpus_vocabulary(project):
    from pipeline.base_models import build_base_model, parameter_count
    from pipeline.paths import out_dir

    math = project["base_models"]["math"]
    math["tokenizer"], math["lm"] = "offline-gpt2:corpus", {**math["lm"], "n_positions": 128}  # GPT-2's pieces: longer
    cfg = project.base_models["math"]
    metrics, _, samples = build_base_model("math", cfg, project, "cpu")
    model = AutoModelForCausalLM.from_pretrained(out_dir(project, "models", "math"))
    tokenizer = AutoTokenizer.from_pretrained(out_dir(project, "models", "math"))
    assert model.config.vocab_size == len(tokenizer) < 2000  # 20 problems' tokens, GPT-2's 256 bytes and EOS
    assert metrics["params"] == parameter_count("math", project) == model.num_parameters()
    assert len(samples) == 2


def test_base_model_config_checks_the_holdout():
    from pipeline.sections import BaseModelConfig

    with pytest.raises(ConfigError, match=r"base_models.m.holdout: must be > 0 for the math corpus"):
        from_dict(BaseModelConfig, {"corpus": "math"}, "base_models.m")
    with pytest.raises(ConfigError, match=r"base_models.i.holdout: .* 0 for imdb"):
        from_dict(BaseModelConfig, {"corpus": "imdb", "holdout": 5}, "base_models.i")


def test_reward_stage_trains_from_the_base_model_and_scores_like_the_rl_reward(project):
    from cory.tasks.rewards import SentimentReward
    from pipeline.base_models import build_base_model
    from pipeline.paths import out_dir
    from pipeline.reward_model import build_reward_model

    with pytest.raises(FileNotFoundError, match=r"holds no model \(run the base_models stage"):
        build_reward_model(project.reward_model, project, "cpu")
    build_base_model("imdb_small", project.base_models["imdb_small"], project, "cpu")
    metrics, record = build_reward_model(project.reward_model, project, "cpu")
    assert metrics["accuracy"] == 1.0 and "accuracy_prefix32" in metrics
    assert [row["epoch"] for row in record["history"]] == [1.0, 2.0, 3.0]
    reward = SentimentReward(str(out_dir(project, "models", "reward")))
    scores = reward(["the movie was", "the film was"], [" very good", " very bad"])
    assert scores[0] > scores[1]


def test_reward_config_rejects_init_from_with_a_loaded_source():
    from pipeline.reward_model import RewardModelConfig

    with pytest.raises(ConfigError, match=r"reward_model.init_from: only applies to source: scratch"):
        from_dict(RewardModelConfig, {"source": "lvwerra/distilbert-imdb"}, "reward_model")


def test_texts_are_tokenized_once_per_process_and_packed_and_cropped_as_before():
    """cory.tasks.tokenizer.encode: the same texts under the same vocabulary (another tokenizer object, one a call left
    padding and truncation set on) come from one tokenization; pack and the classifier's head and tail crops give
    what tokenizing each text on its own gives."""
    import random


    from cory.tasks import tokenizer as tokenization
    from cory.tasks.classifier import _encode_reviews
    from cory.tasks.pretrain import pack

    random.seed(1)
    words = "the movie was great but acting terrible plot twist I loved it never é ☃".split()
    texts = [" ".join(random.choice(words) for _ in range(random.randint(1, 40))) for _ in range(60)]
    first, second = tokenization.load_tokenizer(), tokenization.load_tokenizer()
    second(texts[:2], padding=True, truncation=True, max_length=4)  # leaves state on its backend
    ids, offsets = tokenization.encode(first, texts)
    again = tokenization.encode(second, list(texts))
    assert again[0] is ids and again[1] is offsets  # one tokenization
    assert tokenization.encode(first, texts[1:])[0] is not ids  # other texts: tokenized anew
    with pytest.raises(ValueError):
        ids[0] = 1  # shared: read-only
    each = [first(text, add_special_tokens=False)["input_ids"] for text in texts]
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == each
    assert pack(first, texts).tolist() == [t for seq in each for t in (*seq, first.eos_token_id)]
    for length in (3, 16, 64):
        for tail in (False, True):
            tokens, lengths = _encode_reviews(first, texts, length, tail)
            expected = [(seq[-length:] if tail else seq[:length]) for seq in each]
            assert lengths.tolist() == [len(seq) for seq in expected]
            assert tokens.dtype == torch.int64 and tokens.tolist() == [
                seq + [first.pad_token_id] * (length - len(seq)) for seq in expected]
    with pytest.raises(ValueError, match="text 1 is empty"):
        _encode_reviews(first, ["a", "", "b"], 8)


def test_the_reward_model_alone_needs_its_base_model_and_names_the_command_that_trains_both(project, monkeypatch):
    """`python -m pipeline.base_models reward` with no imdb_small saved: one error before any model trains, naming
    the command; an unknown name: the usage line, naming the reward model too."""
    import pipeline.base_models as stage

    monkeypatch.setattr(stage, "load_params", lambda: project)
    monkeypatch.setattr(stage, "code_digest", lambda name, leave_out=(): "code")
    trained = []
    monkeypatch.setattr(stage, "train_all", lambda todo, params: trained.append(todo) or {})
    with pytest.raises(FileNotFoundError, match=r"reward_model\.init_from: .*imdb_small holds no model \(train it "
                                                r"too: python -m pipeline\.base_models imdb_small reward\)"):
        stage.main(["reward"])
    with pytest.raises(SystemExit, match=r"one of base_models: imdb_small, imdb_large, math, or reward .*\(not rewards\)"):
        stage.main(["rewards"])
    stage.main(["reward", "imdb_small"])  # both: the reward model after its base model, whatever the order asked
    assert trained and list(trained[-1]) == ["imdb_small", "reward"]
