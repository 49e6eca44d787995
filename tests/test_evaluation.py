import itertools
import json

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from cory.schema import ConfigError, from_dict
from cory.tasks.evaluation import EvalConfig, evaluate_pass_at_k, pass_at_k, summarise
from cory.tasks.tokenizer import load_tokenizer
from pipeline.evaluate import (
    EvaluateConfig,
    evaluate,
    load_problems,
    model_runs,
    passk_metrics,
    prepare,
)
from pipeline.params import check_seeds
from pipeline.sections import RuntimeConfig

QUESTIONS = ["q0: 2+2?", "q1: 3+3?", "q2: 1+0?"]
ANSWERS = ["4", "So 3+3=6.\n#### 6", "1"]


# --------------------------------------------------------------------------------------------------------------------
# The estimator
# --------------------------------------------------------------------------------------------------------------------


def test_pass_at_k_hand_computed():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # c / n
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 4, 2) == 1.0  # n - c = 1 < k: every pair holds a correct answer
    assert pass_at_k(5, 5, 5) == 1.0


def test_pass_at_k_equals_brute_force_average_over_k_subsets():
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                expected = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="1 <= k"):
        pass_at_k(4, 1, 0)


def test_eval_config_checks_ks_against_n_samples():
    with pytest.raises(ConfigError, match=r"^evaluation.ks\[1\]: .*n_samples=4"):
        from_dict(EvalConfig, {"n_samples": 4, "ks": [1, 8]}, "evaluation")
    with pytest.raises(ConfigError, match=r"^evaluation.n_sample: unknown setting; did you mean 'n_samples'"):
        from_dict(EvalConfig, {"n_sample": 4}, "evaluation")
    cfg = from_dict(EvalConfig, {"n_samples": 4, "ks": [1, 4], "max_new_tokens": 7}, "evaluation")
    assert cfg.ks == (1, 4)
    gen = cfg.generation
    assert (gen.temperature, gen.top_k, gen.top_p, gen.repetition_penalty) == (1.0, 0, 1.0, 1.0)


# --------------------------------------------------------------------------------------------------------------------
# Sampling and scoring with a tiny random GPT-2
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("offline-gpt2")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=128)).eval()


CFG = EvalConfig(n_samples=4, ks=(1, 2, 4), max_new_tokens=5, batch_size=5, n_examples=2)


def test_evaluate_pass_at_k_is_well_formed(model, tokenizer):
    result = evaluate_pass_at_k(model, tokenizer, QUESTIONS, ANSWERS, "Question: {query} Answer:", CFG)
    assert set(result) == {"pass_at_k", "correct", "n_samples", "n_problems", "mean_response_length", "samples"}
    assert (result["n_samples"], result["n_problems"]) == (4, 3)
    assert len(result["correct"]) == 3 and all(0 <= c <= 4 for c in result["correct"])
    for k, value in result["pass_at_k"].items():
        assert value == pytest.approx(sum(pass_at_k(4, c, k) for c in result["correct"]) / 3)
    assert 1 <= result["mean_response_length"] <= 5
    assert [s["question"] for s in result["samples"]] == QUESTIONS[:2]
    assert all(isinstance(s["response"], str) and isinstance(s["correct"], bool) for s in result["samples"])
    json.dumps(result)  # serialisable as it is
    again = evaluate_pass_at_k(model, tokenizer, QUESTIONS, ANSWERS, "Question: {query} Answer:", CFG)
    assert again["samples"] == result["samples"]  # seeded: the same samples every time


def test_correct_counts_follow_problem_order(model, tokenizer):
    """A reward that accepts every answer to q1 only: c = [0, n, 0], so the (P, n) layout is problem-major."""

    def only_q1(queries, responses, answers):
        return torch.tensor([float(q.startswith("q1")) for q in queries])

    result = evaluate_pass_at_k(model, tokenizer, QUESTIONS, ANSWERS, "{query}", CFG, reward=only_q1)
    assert result["correct"] == [0, 4, 0]
    assert result["pass_at_k"] == {k: pytest.approx(1 / 3) for k in (1, 2, 4)}
    assert [s["n_correct"] for s in result["samples"]] == [0, 4]


def test_evaluate_pass_at_k_rejects_bad_input(model, tokenizer):
    with pytest.raises(ValueError, match="3 questions and 2 answers"):
        evaluate_pass_at_k(model, tokenizer, QUESTIONS, ANSWERS[:2], "{query}", CFG)
    with pytest.raises(ValueError, match="must contain"):
        evaluate_pass_at_k(model, tokenizer, QUESTIONS, ANSWERS, "Question:", CFG)


# --------------------------------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------------------------------

STAGE = {
    "n_samples": 2,
    "ks": [1, 2],
    "max_new_tokens": 4,
    "batch_size": 8,
    "prompt_template": "Question: {query} Answer:",
    "models": {"base": "models/math", "ppo": "runs/math/ppo/seed{seed}/llm1"},
}


def stage_config(**changes) -> EvaluateConfig:
    return from_dict(EvaluateConfig, {**STAGE, **changes}, "evaluation")


def test_stage_config_errors_name_the_setting():
    with pytest.raises(ConfigError, match=r"^evaluation: required setting\(s\) missing: prompt_template"):
        from_dict(EvaluateConfig, {k: v for k, v in STAGE.items() if k != "prompt_template"}, "evaluation")
    with pytest.raises(ConfigError, match=r"^evaluation.models.ppo: only \"\{seed\}\""):
        stage_config(models={"ppo": "runs/{algorithm}/seed{seed}"})
    with pytest.raises(ConfigError, match=r"^evaluation.ks\[1\]"):
        stage_config(ks=[1, 3])


def test_training_seeds_are_checked():
    """The evaluate stage's seeds are params' (checked with the whole tree, once)."""
    assert check_seeds([0, 1]) == [0, 1]
    for bad in (None, [], [0, 0], [0, "1"], 3):
        with pytest.raises(ConfigError, match="^seeds: "):
            check_seeds(bad)


def test_pass_at_k_evaluates_the_seeds_of_the_group_it_reads(default_tree):
    """The models' group's own seeds (the IMDB groups may train more), else the top-level seeds."""
    import copy
    from pipeline.params import evaluation_seeds

    tree = copy.deepcopy(default_tree)
    tree.seeds = [0, 1, 2, 3]
    tree.experiments["math"].seeds = [0, 2]
    assert evaluation_seeds(tree) == [0, 2]
    tree.experiments["math"].seeds = None
    assert evaluation_seeds(tree) == [0, 1, 2, 3]
    tree.evaluation.models = {"base": "models/math"}
    assert evaluation_seeds(tree) == [0, 1, 2, 3]


@pytest.fixture
def default_tree():
    from pipeline.params import validate
    from pipeline.profile import render

    return validate(render("default"))


def test_model_runs_expand_seeds(tmp_path):
    runs = model_runs(stage_config(), [0, 1], tmp_path)
    assert runs == [
        ("base", "none", tmp_path / "models/math"),
        ("ppo", "0", tmp_path / "runs/math/ppo/seed0/llm1"),
        ("ppo", "1", tmp_path / "runs/math/ppo/seed1/llm1"),
    ]


def save_tiny_model(model, tokenizer, folder):
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def write_problems(path):
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in zip(QUESTIONS, ANSWERS)))
    return path


def test_missing_model_folders_are_all_named_in_one_error(model, tokenizer, tmp_path):
    save_tiny_model(model, tokenizer, tmp_path / "runs/math/ppo/seed0/llm1")
    (tmp_path / "models/math").mkdir(parents=True)  # a folder without a model in it
    problems = write_problems(tmp_path / "test.jsonl")
    with pytest.raises(FileNotFoundError) as error:
        prepare(stage_config(), [0, 1], problems, tmp_path)
    message = str(error.value)
    assert "base (seed none)" in message and "ppo (seed 1)" in message and "seed0" not in message
    runs, questions, _ = prepare(stage_config(models={"ppo": STAGE["models"]["ppo"]}), [0], problems, tmp_path)
    assert len(runs) == 1 and questions == QUESTIONS


def test_load_problems_errors(tmp_path):
    path = write_problems(tmp_path / "test.jsonl")
    assert load_problems(path, 2) == (QUESTIONS[:2], ANSWERS[:2])
    with pytest.raises(ValueError, match="4 requested but .* has only 3"):
        load_problems(path, 4)
    (tmp_path / "bad.jsonl").write_text('{"question": "q"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: .*question and answer"):
        load_problems(tmp_path / "bad.jsonl", None)
    with pytest.raises(FileNotFoundError, match="did its DVC stage run"):
        load_problems(tmp_path / "absent.jsonl", None)


def test_summarise_means_and_stds_over_seeds():
    summary = summarise({"ppo": {"0": {1: 0.2, 2: 0.4}, "1": {1: 0.4, 2: 0.6}}, "base": {"none": {1: 0.1, 2: 0.3}}})
    assert summary["ppo"]["mean"] == pytest.approx({1: 0.3, 2: 0.5})
    assert summary["ppo"]["std"] == pytest.approx({1: 0.1, 2: 0.1})  # population std of two values
    assert summary["base"] == {"seeds": {"none": {1: 0.1, 2: 0.3}}, "mean": {1: 0.1, 2: 0.3}, "std": {1: 0.0, 2: 0.0}}
    assert passk_metrics(summary, 2) == pytest.approx(
        {"eval/ppo/pass_at_k": 0.5, "eval/ppo/seed0/pass_at_k": 0.4, "eval/ppo/seed1/pass_at_k": 0.6,
         "eval/base/pass_at_k": 0.3}
    )  # fmt: skip


def test_stage_evaluates_every_model_run(model, tokenizer, tmp_path):
    save_tiny_model(model, tokenizer, tmp_path / "tiny")
    for folder in ("models/math", "runs/math/ppo/seed0/llm1", "runs/math/ppo/seed1/llm1"):
        (tmp_path / folder).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / folder).symlink_to(tmp_path / "tiny", target_is_directory=True)
    cfg = stage_config()
    passk, details = evaluate(cfg, *prepare(cfg, [0, 1], write_problems(tmp_path / "test.jsonl"), tmp_path), "cpu")
    assert set(passk) == {"base", "ppo"}
    assert set(passk["ppo"]["seeds"]) == {"0", "1"} and set(passk["base"]["seeds"]) == {"none"}
    assert set(passk["ppo"]["mean"]) == {1, 2}
    assert len(details["ppo"]["1"]["correct"]) == 3


def test_stage_evaluates_the_runs_at_once_as_one_after_another(model, tokenizer, tmp_path):
    # runtime.workers > 1: each model run in a worker process of its own (two here, on the CPU), each run's numbers
    # those of the evaluation one after another, in params order, though the runs end in any order
    other = GPT2LMHeadModel(model.config).eval()
    with torch.no_grad():  # another model than the base: the runs' results differ, so a mix-up would show
        for mine, theirs in zip(other.parameters(), model.parameters()):
            mine.copy_(theirs + 0.5 * torch.randn(theirs.shape, generator=torch.Generator().manual_seed(1)))
    save_tiny_model(model, tokenizer, tmp_path / "base")
    save_tiny_model(other, tokenizer, tmp_path / "other")
    links = {"models/math": "base", "runs/math/ppo/seed0/llm1": "other", "runs/math/ppo/seed1/llm1": "base"}
    for folder, target in links.items():
        (tmp_path / folder).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / folder).symlink_to(tmp_path / target, target_is_directory=True)
    cfg = stage_config()
    runs, questions, answers = prepare(cfg, [0, 1], write_problems(tmp_path / "test.jsonl"), tmp_path)
    one_after_another = evaluate(cfg, runs, questions, answers, "cpu")
    at_once = evaluate(cfg, runs, questions, answers, "cpu", RuntimeConfig(workers=2))
    assert at_once == one_after_another
    assert list(at_once[0]) == ["base", "ppo"] and list(at_once[0]["ppo"]["seeds"]) == ["0", "1"]
    details = at_once[1]
    assert details["ppo"]["1"] == details["base"]["none"] and details["ppo"]["0"] != details["base"]["none"]


# --------------------------------------------------------------------------------------------------------------------
# The authors' GSM8K protocol beside pass@k (cory.tasks.gsm8k_protocol; its own tests: tests/test_gsm8k_protocol.py)
# --------------------------------------------------------------------------------------------------------------------

SOLUTIONS = ["2+2=4\n#### 4", "So 3+3=6.\n#### 6", "#### 1"]


def test_the_stage_writes_the_authors_protocol_beside_pass_at_k(model, tokenizer, tmp_path):
    from pipeline.common import write_json

    save_tiny_model(model, tokenizer, tmp_path / "tiny")
    for folder in ("models/math", "runs/math/ppo/seed0/llm1", "runs/math/ppo/seed1/llm1"):
        (tmp_path / folder).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / folder).symlink_to(tmp_path / "tiny", target_is_directory=True)
    problems = tmp_path / "test.jsonl"
    problems.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in zip(QUESTIONS, SOLUTIONS)))
    runs = prepare(stage_config(), [0, 1], problems, tmp_path)
    without, _ = evaluate(stage_config(), *runs, "cpu")
    cfg = stage_config(authors_protocol={"enabled": True, "ks": [1, 3], "max_new_tokens": 3}, n_examples=1)
    passk, details = evaluate(cfg, *runs, "cpu")
    for name in ("base", "ppo"):  # the unbiased pass@k as without it, its keys unchanged
        assert {key: passk[name][key] for key in ("seeds", "mean", "std")} == without[name]
        authors = passk[name]["authors_protocol"]
        assert set(authors) == {"seeds", "mean", "std"} and set(authors["mean"]) == {1, 3}
        assert all(0 <= v <= 1 for run in authors["seeds"].values() for v in run.values())
    assert set(passk["ppo"]["authors_protocol"]["seeds"]) == {"0", "1"}
    run = details["ppo"]["0"]["authors_protocol"]
    assert set(run) == {"correct", "eos_rate", "samples"} and len(run["correct"][3]) == 3
    assert run["samples"][0]["gold"] == "4" and "parsed" in run["samples"][0]
    write_json(tmp_path / "passk.json", passk)  # serialisable as it is; the report reads the same keys as before
    written = json.loads((tmp_path / "passk.json").read_text())
    assert written["base"]["mean"] == {str(k): v for k, v in without["base"]["mean"].items()}
    assert set(written["base"]["authors_protocol"]["seeds"]["none"]) == {"1", "3"}
