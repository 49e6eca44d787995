"""The role-swap test (cory.rl.role_swap): who answers in which role, the file a CORY run writes with held-out
prompts, and the report's claim and figure on it (cory.report.claims_roles)."""

import csv
import json
from types import SimpleNamespace

import pytest
import torch

from cory.report.claims import HELD, NOT_HELD, NOT_MEASURABLE
from cory.report.config import ReportConfig
from cory.report.report import write_report
from cory.rl.config import CORYConfig, GenerationConfig, PPOConfig, TrainConfig
from cory.rl.role_swap import role_swap_test
from cory.rl.trainer import Trainer
from cory.runs.config import Job, TaskConfig
from cory.runs.run import run_training
from cory.schema import ConfigError

from report_fixtures import experiments_of, fixture_experiments, write_fixture
from run_fixtures import WORDS, write_task
from tiny import tiny_lm, tiny_tokenizer

TEMPLATE = "{query} | {response} |"


def fake_trainer(role_exchange=True, knowledge_transfer=True, on_nonfinite="error"):
    """Two agents whose answers name them and the prompt they saw; LLM1 played pioneer last."""
    llm1, llm2 = (SimpleNamespace(name=n, device=torch.device("cpu")) for n in ("llm1", "llm2"))
    cfg = TrainConfig(prompt_template="{query}", ppo=PPOConfig(on_nonfinite=on_nonfinite, generation=GenerationConfig(
        response_length=(2, 7))), cory=CORYConfig(observer_template=TEMPLATE, role_exchange=role_exchange,
                                                knowledge_transfer=knowledge_transfer))
    lengths = []

    def generate(agent, prompts, length):
        lengths.append(length)
        return SimpleNamespace(responses=[f"{agent.name} saw [{p}]" for p in prompts])

    return SimpleNamespace(cfg=cfg, roles=SimpleNamespace(pioneer=llm1, observer=llm2), _generate=generate,
                           lengths=lengths)


def name_reward(queries, responses, answers=None):
    """1 for LLM1's answers, 0 for LLM2's, + 10 for an answer that saw LLM2's."""
    return torch.tensor([float(r.startswith("llm1")) + 10.0 * ("| llm2 saw" in r) for r in responses])


def test_each_agent_answers_in_the_role_it_did_not_play_last():
    trainer = fake_trainer()
    trainer.reward_fn = name_reward
    result = role_swap_test(trainer, ["a", "b"])
    # as trained: LLM1 pioneer (1), LLM2 its observer (0); swapped: LLM2 pioneer (0), LLM1 observing LLM2 (1 + 10)
    assert result["last_role"] == {"llm1": "pioneer", "llm2": "observer"}
    assert result["task_reward"] == {"llm1": {"pioneer": 1.0, "observer": 11.0},
                                     "llm2": {"pioneer": 0.0, "observer": 0.0}}
    assert result["swap_change"] == {"pioneer": -1.0, "observer": 11.0}
    assert (result["queries"], result["response_length"], result["nonfinite"]) == (2, 7, 0)
    assert trainer.lengths == [7, 7, 7, 7]  # every answer at the longest response length


def test_the_observer_sees_the_pioneers_answer_only_with_knowledge_transfer():
    seen = []

    def reward(queries, responses, answers=None):
        seen.extend(responses)
        return torch.zeros(len(responses))

    for transfer, observer_answer in ((True, "llm2 saw [a | llm1 saw [a] |]"), (False, "llm2 saw [a]")):
        trainer = fake_trainer(knowledge_transfer=transfer)
        trainer.reward_fn = reward
        seen.clear()
        role_swap_test(trainer, ["a"])
        assert seen[:2] == ["llm1 saw [a]", observer_answer]


def test_a_nonfinite_score_stops_the_test_or_is_left_out():
    def reward(queries, responses, answers=None):
        return torch.tensor([float("nan") if r.startswith("llm2 saw [b") else 1.0 for r in responses])

    trainer = fake_trainer()
    trainer.reward_fn = reward
    with pytest.raises(FloatingPointError, match="role-swap test: the task reward returned 2 non-finite scores"):
        role_swap_test(trainer, ["a", "b"])
    trainer = fake_trainer(on_nonfinite="skip")
    trainer.reward_fn = reward
    result = role_swap_test(trainer, ["a", "b"])
    assert result["nonfinite"] == 2 and result["task_reward"]["llm2"] == {"pioneer": 1.0, "observer": 1.0}


def test_the_test_samples_from_a_fork_of_the_rng():
    torch.manual_seed(0)
    trainer = Trainer(TrainConfig(ppo=PPOConfig(batch_size=4, mini_batch_size=4, generation=GenerationConfig(
        response_length=(3, 3), repetition_penalty=1.0)), cory=CORYConfig(observer_template=TEMPLATE)), tiny_lm(),
        tiny_tokenizer(), name_reward)
    state = torch.get_rng_state()
    result = role_swap_test(trainer, ["the movie", "a film"])
    assert torch.equal(torch.get_rng_state(), state)
    assert set(result["task_reward"]) == {"llm1", "llm2"} and result["role_exchange"] is True


# --------------------------------------------------------------------------------------------------------------------
# A run's role_swap.json
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> TaskConfig:
    """run_fixtures' tiny task with prompts of several lengths (the held-out ones are the longest)."""
    return write_task(tmp_path_factory.mktemp("task"),
                      [f"{WORDS[i % len(WORDS)]} {'good ' * (i // 6)}".strip() for i in range(24)])


def job(task, where, n_agents=2, held_out=6, algorithm="ppo", role_exchange=True, batch_size=8) -> Job:
    """A run of `task` whose last `held_out` prompts are held out (tasks.<task>.held_out)."""
    k = 2 if algorithm != "ppo" else 1
    ppo = PPOConfig(learning_rate=3e-3, batch_size=batch_size, mini_batch_size=4, samples_per_query=k,
                    generation=GenerationConfig(response_length=(3, 5), repetition_penalty=1.0))
    train = TrainConfig(iterations=4, samples_to_log=2, algorithm=algorithm, ppo=ppo,
                        cory=CORYConfig(n_agents=n_agents, role_exchange_period=3, role_exchange=role_exchange,
                                        observer_template=TEMPLATE))
    task = TaskConfig(**{**vars(task), "held_out": held_out})
    return Job("g", "r", 0, train, task, task.model, str(where / "run"), True, str(where / "ckpt"), fingerprint="f")


@pytest.mark.parametrize("algorithm, role_exchange", [("ppo", True), ("rloo", False)])
def test_a_cory_run_with_heldout_prompts_writes_its_role_swap(task, tmp_path, monkeypatch, algorithm, role_exchange):
    torch.set_num_threads(1)
    asked, real_step = [], Trainer.step

    def step(self, queries, answers=None):
        asked.extend(queries)
        return real_step(self, queries, answers)

    monkeypatch.setattr(Trainer, "step", step)
    summary = run_training(job(task, tmp_path, algorithm=algorithm, role_exchange=role_exchange), "cpu",
                           checkpoint_every=2)
    heldout = [json.loads(line)["question"] for line in open(task.prompts)][-6:]
    assert asked and not set(asked) & set(heldout)  # no iteration drew a held-out prompt
    result = json.loads((tmp_path / "run" / "role_swap.json").read_text())
    assert "role_swap.json" in summary["files"] and "role_swap" in summary["phase_seconds"]
    # 4 iterations, roles exchanged after the third: LLM2 ended as pioneer; without role exchange LLM1 did
    pioneer = "llm2" if role_exchange else "llm1"
    assert result["last_role"][pioneer] == "pioneer" and result["role_exchange"] is role_exchange
    assert (result["queries"], result["response_length"], result["nonfinite"]) == (6, 5, 0)
    rewards = result["task_reward"]
    assert all(0.0 <= rewards[a][r] <= 1.0 for a in ("llm1", "llm2") for r in ("pioneer", "observer"))  # 0/1 math
    other = "llm1" if pioneer == "llm2" else "llm2"
    assert result["swap_change"] == {"pioneer": rewards[other]["pioneer"] - rewards[pioneer]["pioneer"],
                                     "observer": rewards[pioneer]["observer"] - rewards[other]["observer"]}
    rows = list(csv.DictReader(open(tmp_path / "run" / "history.csv")))
    assert len(rows) == 4 and ("llm1/value_loss" in rows[0]) == (algorithm == "ppo")


def test_a_single_agent_holds_the_same_prompts_out_and_writes_no_role_swap(task, tmp_path):
    run_training(job(task, tmp_path, n_agents=1), "cpu")
    assert (tmp_path / "run" / "history.csv").is_file() and not (tmp_path / "run" / "role_swap.json").exists()


def test_heldout_prompts_that_leave_no_batch_are_one_error_before_the_model_loads(task, tmp_path, monkeypatch):
    import cory.runs.run as run

    monkeypatch.setattr(run, "load_lm", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ConfigError, match=r"^tasks\.<the task of experiments\.g>\.held_out: holding out 20 of the "
                                          r"24 prompts of .* leaves 4, fewer than the 8 queries of a batch "
                                          r"\(run g/r/seed0\)"):
        run_training(job(task, tmp_path, held_out=20), "cpu")


# --------------------------------------------------------------------------------------------------------------------
# The report's claim and figure
# --------------------------------------------------------------------------------------------------------------------


def swap_file(run_dir, last_pioneer: str, swap_change: dict, base: float = 2.0):
    """role_swap.json of a run: the last players get `base`, the other agents base + the swap change."""
    other = {"llm1": "llm2", "llm2": "llm1"}
    last = {"pioneer": last_pioneer, "observer": other[last_pioneer]}
    rewards = {a: {} for a in ("llm1", "llm2")}
    for role in ("pioneer", "observer"):
        rewards[last[role]][role] = base
        rewards[other[last[role]]][role] = base + swap_change[role]
    (run_dir / "role_swap.json").write_text(json.dumps({
        "queries": 256, "response_length": 16, "role_exchange": last_pioneer == "llm2", "nonfinite": 0,
        "last_role": {last["pioneer"]: "pioneer", last["observer"]: "observer"}, "task_reward": rewards,
        "swap_change": swap_change}))


def test_the_report_tests_the_role_swap_claim_and_draws_its_figure(tmp_path):
    outputs, reports = tmp_path / "outputs", tmp_path / "reports"
    write_fixture(outputs)  # report_fixtures' fake runs: PPO's task reward rises by about 2 on every seed
    for seed in (0, 1, 2):
        swap_file(outputs / f"runs/imdb/cory/seed{seed}", "llm2", {"pioneer": 0.02 * seed, "observer": -0.01 * seed})
        swap_file(outputs / f"runs/imdb/cory_no_rex/seed{seed}", "llm1",
                  {"pioneer": -1.0 - 0.1 * seed, "observer": -0.5 - 0.1 * seed})
    experiments = experiments_of(fixture_experiments())
    claims = {c.key: c for c in write_report(outputs, reports, ReportConfig(collapse_kl=10.0), experiments, None,
                                             "fixture")[1]}
    claim = claims["role_swap"]
    assert claim.verdict == HELD and claim.figure == "fig_role_swap_imdb.png"
    assert [r.label for r in claim.results] == [
        "w/o REx, pioneer role: mean swap change", "w/o REx, observer role: mean swap change",
        "CORY, pioneer role: mean swap change", "CORY, observer role: mean swap change"]
    assert claim.results[0].interval.estimate == pytest.approx(-1.1)
    assert claim.quantities["w/o REx, pioneer role: task reward of the other agent"] == pytest.approx(
        {0: 1.0, 1: 0.9, 2: 0.8})
    assert (reports / "fig_role_swap_imdb.png").stat().st_size > 10_000
    assert "fig_role_swap_imdb.png" in (reports / "REPORT.md").read_text()
    assert json.loads((reports / "claims.json").read_text())["role_swap"]["verdict"] == HELD

    # with role exchange the pioneer role falls by as much as PPO gains: the claim does not hold
    for seed in (0, 1, 2):
        swap_file(outputs / f"runs/imdb/cory/seed{seed}", "llm2", {"pioneer": -2.0 - 0.1 * seed, "observer": 0.0})
    claims = {c.key: c for c in write_report(outputs, reports, ReportConfig(collapse_kl=10.0), experiments, None,
                                             "fixture")[1]}
    assert claims["role_swap"].verdict == NOT_HELD


def test_a_group_where_only_one_run_took_the_test_gets_a_claim_that_says_why(tmp_path):
    outputs, reports = tmp_path / "outputs", tmp_path / "reports"
    write_fixture(outputs, seeds=(0,), iterations=5)
    swap_file(outputs / "runs/imdb/cory/seed0", "llm1", {"pioneer": 0.0, "observer": 0.0})
    claims = {c.key: c for c in write_report(outputs, reports, ReportConfig(test_claims=False),
                                             experiments_of(fixture_experiments(seeds=(0,))), None, "fixture")[1]}
    claim = claims["role_swap"]
    assert claim.measured_verdict == NOT_MEASURABLE and "`imdb/cory_no_rex` took no role-swap test" in claim.rule
    assert (reports / "fig_role_swap_imdb.png").is_file()  # CORY's bars alone

    held = tmp_path / "held"  # the task held prompts out (samples.jsonl answers them), yet no run wrote the file
    write_fixture(held, seeds=(0,), iterations=5, held_out=2)
    with pytest.raises(FileNotFoundError, match=r"cory/seed0/role_swap\.json: not found"):
        write_report(held, reports, ReportConfig(test_claims=False),
                     experiments_of(fixture_experiments(seeds=(0,))), None, "fixture")
