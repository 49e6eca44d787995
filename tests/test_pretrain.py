"""Base LMs and the reward classifier: shapes, the padded-head loss, learning on toy data, save/load, the stages."""

import json

import huggingface_hub

import pytest
import torch
import torch.nn.functional as F
from tiny import WORDS, tiny_tokenizer
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from cory.schema import ConfigError, from_dict
from cory.tasks.classifier import build_classifier, classifier_accuracy, train_reward_classifier
from cory.tasks.config import ClassifierConfig
from cory.hf import count_parameters, load_pretrained, save_model
from cory.tasks.config import LMConfig, PretrainConfig
from cory.tasks.pretrain import build_causal_lm, lm_loss, pretrain_lm, sample_texts
from cory.tracking.runs import FinishedRun

TINY = LMConfig(n_layer=2, n_embd=32, n_head=2, n_positions=64, dropout=0.0)


@pytest.fixture
def tok():
    return tiny_tokenizer()


def test_parameter_count_is_gpt2s_formula():
    vocab, d, layers, positions = 101, 32, 3, 40
    model = build_causal_lm(LMConfig(n_layer=layers, n_embd=d, n_head=4, n_positions=positions), vocab, 0)
    # tied embeddings + positions + per block (4 matrices with biases, 2 layer norms) + final layer norm
    assert count_parameters(model) == vocab * d + positions * d + layers * (12 * d * d + 13 * d) + 2 * d


def test_padded_head_loss_equals_the_models_own_loss():
    model = build_causal_lm(TINY, 101, 0).eval()  # 101 rows: padded to 128 inside lm_loss
    window = torch.randint(0, 101, (3, 9))
    expected = F.cross_entropy(model(input_ids=window[:, :-1]).logits.flatten(0, 1), window[:, 1:].flatten())
    loss = lm_loss(model, window)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(lm_loss(model, window, reduction="sum"), expected * 24)
    loss.backward()
    grad = model.transformer.wte.weight.grad.clone()
    model.zero_grad()
    expected.backward()
    torch.testing.assert_close(grad, model.transformer.wte.weight.grad)


def test_pretraining_learns_a_repetitive_corpus(tok):
    texts = ["the movie was very good and the plot was good"] * 20
    model = build_causal_lm(TINY, len(tok), tok.eos_token_id)
    cfg = PretrainConfig(steps=40, batch_tokens=128, seq_len=16, learning_rate=1e-2, warmup_steps=5, eval_every=20)
    metrics = pretrain_lm(model, tok, texts, texts[:2], cfg, "cpu")
    assert [row["step"] for row in metrics["history"]] == [20, 40]
    # from about ln(14) = 2.6 at random init; what is left is mostly each window's unpredictable first token
    assert metrics["val_loss"] < 0.7 and metrics["history"][0]["val_loss"] > metrics["val_loss"]
    assert metrics["val_perplexity"] == pytest.approx(torch.tensor(metrics["val_loss"]).exp().item())
    assert metrics["params"] == count_parameters(model) and metrics["tokens_per_second"] > 0
    continuation = sample_texts(model, tok, ["the movie"], 4, "cpu", seed=0)
    assert continuation[0].split()[:2] == ["was", "very"]


def test_epochs_set_the_number_of_steps(tok):
    texts = ["good movie"] * 16  # 16 * 3 tokens (with EOS) = 48 tokens
    model = build_causal_lm(TINY, len(tok), tok.eos_token_id)
    metrics = pretrain_lm(model, tok, texts, texts, PretrainConfig(epochs=2.0, batch_tokens=16, seq_len=8), "cpu")
    assert metrics["steps"] == 6


def test_micro_batches_take_the_same_step(tok):
    # the step's windows in equal slices, gradients summed: the same weights up to float rounding (no dropout, whose
    # masks are drawn per forward), the same loss history
    texts = [f"the movie was {w} and the plot was {v}" for w, v in zip(WORDS * 3, reversed(WORDS * 3))]
    runs = []
    for micro_batches in (1, 4):
        torch.manual_seed(0)
        model = build_causal_lm(TINY, len(tok), tok.eos_token_id)
        cfg = PretrainConfig(steps=6, batch_tokens=128, micro_batches=micro_batches, seq_len=16, learning_rate=1e-2,
                             warmup_steps=2, eval_every=3)
        runs.append((model, pretrain_lm(model, tok, texts, texts[:4], cfg, "cpu")))
    (one, whole), (four, sliced) = runs
    for a, b in zip(one.parameters(), four.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # Adam: ~lr per step
    for a, b in zip(whole["history"], sliced["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-5)


def test_regional_compilation_takes_the_eager_steps_and_leaves_the_blocks_eager(tok):
    """pretrain.compile "regional": each block compiled in place, one compilation they share; the same losses as the
    eager steps up to float rounding (inductor's fused kernels), and the blocks are plain modules again afterwards."""
    from torch._dynamo.utils import counters

    texts = [f"the movie was {w} and the plot was {v}" for w, v in zip(WORDS * 3, reversed(WORDS * 3))]
    runs = []
    for mode in (False, "regional"):
        torch.manual_seed(0)
        model = build_causal_lm(TINY, len(tok), tok.eos_token_id)
        cfg = PretrainConfig(steps=4, batch_tokens=128, seq_len=16, learning_rate=1e-2, warmup_steps=2, eval_every=2,
                             compile=mode)
        counters.clear()
        runs.append((model, pretrain_lm(model, tok, texts, texts[:4], cfg, "cpu")))
    (_, eager), (compiled, regional) = runs
    assert counters["stats"]["unique_graphs"] >= 2  # a block and the output layer did run compiled
    # one graph per block function, not per block: 2 blocks x (train, eval) would be 4 + the output layer's
    assert counters["stats"]["unique_graphs"] <= 4
    for a, b in zip(eager["history"], regional["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-4)
    assert all(block._compiled_call_impl is None for block in compiled.transformer.h)
    with pytest.raises(ConfigError, match=r"pretrain.compile"):
        from_dict(PretrainConfig, {"compile": "everything"}, "pretrain")


def test_regional_compilation_of_a_model_without_blocks_names_the_setting():
    from cory.tasks.pretrain import compiled_loss

    model = torch.nn.Module()
    model.base_model = torch.nn.Linear(2, 2)  # no list of blocks to compile one by one
    with pytest.raises(ConfigError, match=r"pretrain.compile: 'regional' .* Linear has none"):
        with compiled_loss(model, "regional"):
            pass


def test_pretrain_config_errors_name_the_setting():
    with pytest.raises(ConfigError, match=r"base_models.x.pretrain.batch_tokens: must be a positive multiple of seq_len"):
        from_dict(PretrainConfig, {"batch_tokens": 100, "seq_len": 64}, "base_models.x.pretrain")
    with pytest.raises(ConfigError, match=r"base_models.x.pretrain.micro_batches: must be >= 1 and divide the step's 4 "):
        from_dict(PretrainConfig, {"batch_tokens": 256, "seq_len": 64, "micro_batches": 3}, "base_models.x.pretrain")
    with pytest.raises(ConfigError, match=r"lm.n_head: must divide n_embd"):
        from_dict(LMConfig, {"n_embd": 30, "n_head": 4}, "lm")


def toy_sentiment(n: int) -> tuple[list[str], list[int]]:
    texts = [("the movie was very good" if i % 2 else "the film was very bad") + " and the plot" * (i % 3) for i in range(n)]
    return texts, [i % 2 for i in range(n)]


def test_classifier_learns_a_separable_toy_task(tok):
    texts, labels = toy_sentiment(64)
    cfg = ClassifierConfig(epochs=4, batch_size=16, learning_rate=3e-3, warmup_steps=2, max_length=16, lm=TINY)
    model, metrics = train_reward_classifier(texts, labels, texts[:10], labels[:10], tok, cfg, "cpu")
    assert metrics["accuracy"] == 1.0
    assert metrics["accuracy_prefix32"] == 1.0
    assert [row["epoch"] for row in metrics["history"]] == [1.0, 2.0, 3.0, 4.0]
    assert model.config.id2label == {0: "NEGATIVE", 1: "POSITIVE"}


def test_classifier_accuracy_reads_the_last_real_token_under_padding(tok):
    model = build_classifier(tok, ClassifierConfig(lm=TINY)).eval()
    texts = ["good", "the movie was very good and the plot"]  # very different lengths: the first is padded
    batch = tok(texts, padding=True, padding_side="right", return_tensors="pt")
    alone = torch.stack([model(**tok([t], return_tensors="pt")).logits[0] for t in texts])
    torch.testing.assert_close(model(**batch).logits, alone)
    predicted = alone.argmax(-1).tolist()
    assert classifier_accuracy(model, tok, texts, predicted, 16, "cpu") == 1.0


def test_tail_truncation_reads_the_end_of_a_long_review(tok):
    from cory.tasks.classifier import _encode_reviews

    head, lengths = _encode_reviews(tok, ["the movie was very good"], 2)
    tail, _ = _encode_reviews(tok, ["the movie was very good"], 2, tail=True)
    assert tok.decode(head[0]).split() == ["the", "movie"] and tok.decode(tail[0]).split() == ["very", "good"]
    assert lengths.tolist() == [2]
    model = build_classifier(tok, ClassifierConfig(lm=TINY)).eval()
    texts = ["the movie was very good", "a plot not very good"]
    ends = model(**tok(["very good", "very good"], return_tensors="pt")).logits.argmax(-1).tolist()
    assert classifier_accuracy(model, tok, texts, ends, 2, "cpu", truncation="tail") == 1.0
    assert tok.truncation_side == "right"  # restored


def test_classifier_starts_from_the_lms_body(tok, tmp_path):
    lm = build_causal_lm(TINY, len(tok), tok.eos_token_id)
    save_model(lm, tok, tmp_path)
    classifier = build_classifier(tok, ClassifierConfig(), init_from=tmp_path)
    torch.testing.assert_close(classifier.transformer.h[1].mlp.c_fc.weight, lm.transformer.h[1].mlp.c_fc.weight)
    assert classifier.config.pad_token_id == tok.pad_token_id and classifier.config.num_labels == 2


def test_save_and_load_with_plain_transformers(tok, tmp_path):
    lm = build_causal_lm(TINY, len(tok), tok.eos_token_id).eval()
    save_model(lm, tok, tmp_path / "lm")
    assert (tmp_path / "lm" / "model.safetensors").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "lm").eval()
    ids = torch.tensor([[2, 3, 4, 5]])
    torch.testing.assert_close(loaded(input_ids=ids).logits, lm(input_ids=ids).logits)
    assert AutoTokenizer.from_pretrained(tmp_path / "lm").convert_ids_to_tokens([2, 3]) == WORDS[2:4]

    classifier = build_classifier(tok, ClassifierConfig(lm=TINY)).eval()
    save_model(classifier, tok, tmp_path / "reward")
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path / "reward").eval()
    torch.testing.assert_close(again(input_ids=ids).logits, classifier(input_ids=ids).logits)
    assert again.config.id2label == {0: "NEGATIVE", 1: "POSITIVE"}


def test_loading_says_the_hub_is_unreachable_offline(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match=r"base_models.imdb_small.source: 'gpt2-large' .*hub is unreachable"):
        load_pretrained(AutoModelForCausalLM.from_pretrained, "gpt2-large", "base_models.imdb_small.source")
    with pytest.raises(ConfigError, match="the local folder cannot be loaded"):
        load_pretrained(AutoModelForCausalLM.from_pretrained, str(tmp_path), "reward_model.source")


# --------------------------------------------------------------------------------------------------------------------
# The stages, on tiny models and data
# --------------------------------------------------------------------------------------------------------------------


class Project(dict):
    """The params of a test project as the stages read them (pipeline.params.Params' sections, typed anew from the
    mapping at each read, so that a test changes a setting by changing the mapping)."""

    @property
    def profile(self) -> str:
        return self["profile"]

    @property
    def base_models(self) -> dict:
        from cory.schema import from_dict
        from pipeline.sections import BaseModelConfig

        return {name: from_dict(BaseModelConfig, cfg, f"base_models.{name}") for name, cfg in self["base_models"].items()}

    @property
    def reward_model(self):
        from cory.schema import from_dict
        from pipeline.sections import RewardModelConfig

        return from_dict(RewardModelConfig, self["reward_model"], "reward_model")

    @property
    def runtime(self):
        from cory.schema import from_dict
        from pipeline.sections import RuntimeConfig

        return from_dict(RuntimeConfig, self.get("runtime", {}), "runtime")


@pytest.fixture
def project(tmp_path, monkeypatch, tok):
    """A profile "t" under tmp_path with toy IMDB splits, math problems and a tiny tokenizer folder."""
    import pipeline.common
    import pipeline.paths
    from cory.tasks.config import MathGenConfig
    from cory.tasks.mathgen import generate_problems

    monkeypatch.setattr(pipeline.paths, "ROOT", tmp_path)
    tok.save_pretrained(tmp_path / "tok")
    texts, labels = toy_sentiment(48)
    rows = [{"text": t, "label": y} for t, y in zip(texts, labels)]
    data = tmp_path / "outputs" / "t" / "data"
    pipeline.common.write_jsonl(data / "imdb" / "train.jsonl", rows[:40])
    pipeline.common.write_jsonl(data / "imdb" / "validation.jsonl", rows[40:])
    problems = generate_problems(MathGenConfig(n_pretrain=20, n_rl=0, n_test=0))["pretrain"]
    pipeline.common.write_jsonl(data / "math" / "pretrain.jsonl", problems)
    lm = {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 64}
    pretrain = {"steps": 4, "batch_tokens": 64, "seq_len": 16, "eval_every": 2}
    model = {"tokenizer": str(tmp_path / "tok"), "lm": lm, "pretrain": pretrain, "samples": 2, "sample_tokens": 3}
    return Project({
        "profile": "t",
        "base_models": {
            "imdb_small": {"corpus": "imdb", **model},
            "imdb_large": {"corpus": "imdb", **model, "lm": {**lm, "n_layer": 4}, "compare_params_with": "imdb_small"},
            "math": {"corpus": "math", "holdout": 4, **model},
        },
        "reward_model": {"classifier": {"epochs": 3, "batch_size": 8, "max_length": 16, "learning_rate": 3e-3, "warmup_steps": 2}},
    })


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

    import numpy as np

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
