"""The training loop of CORY (paper Algorithm 1); with one agent it is the single-agent PPO baseline.

`Trainer.step` is one iteration: pioneer generates -> observer prompt -> observer generates -> score both ->
collective reward -> PPO update of each agent -> maybe exchange roles -> metrics. PPO and CORY share every line of
it; PPO simply has no observer.

Usage (examples/cory_on_your_model.py runs it on any transformers causal LM):

    trainer = Trainer(cfg, lm, tokenizer, reward)   # cfg: TrainConfig; reward: RewardFn (cory.rl.reward)
    for it in range(cfg.iterations):
        metrics = trainer.step(queries_of_the_batch)  # ppo.queries_per_batch distinct queries
    trainer.save("trained")                         # trained/llm1/ (and llm2/): plain transformers folders
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from cory.rl import ppo
from cory.rl.agents import Agent, build_agents
from cory.rl.config import TrainConfig
from cory.rl.kernels import prepare_for_rl
from cory.rl.learner import Experience, NonFiniteError, make_experience, whole_groups, ppo_update
from cory.rl.metrics import distinct_n
from cory.rl.reward import RewardFn, check_scores
from cory.rl.roles import Roles, collective_reward, exchange_due, observer_prompts
from cory.rl.rollout import Rollout, generate
from cory.schema import ConfigError


class Trainer:
    """PPO (cfg.cory.n_agents == 1) or CORY (== 2) on one task.

    cfg: the run's settings (TrainConfig; CORY with knowledge transfer needs the task's cfg.cory.observer_template).
    lm: a transformers causal LM (GPT-2, Llama, ...), on the device to train on; it becomes LLM1, and CORY's LLM2 and
    the frozen reference are copies of it (or LoRA adapters on it, with cfg.lora_rank). tokenizer: its tokenizer,
    with a pad token (prompts are padded on the left whatever its padding_side). reward_fn: the task reward
    (cory.rl.reward.RewardFn). seed: the response lengths' random stream (default cfg.seed); seed torch yourself for
    the sampling (torch.manual_seed), as the pipeline does once per run."""

    def __init__(self, cfg: TrainConfig, lm, tokenizer, reward_fn: RewardFn, seed: int | None = None):
        cfg.cory.check_observer_template()
        if tokenizer.pad_token_id is None:
            raise ConfigError("tokenizer.pad_token: the tokenizer has none, and the trainer pads a batch's prompts; "
                              "set tokenizer.pad_token = tokenizer.eos_token (cory.load_tokenizer does)")
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.reward_fn = reward_fn
        prepare_for_rl(lm, cfg.ppo.speed)  # speed only, before duplication: the copies and the reference inherit it
        # Duplication (paper §3.1): whole copies, or LoRA adapters on one shared base (see cory.rl.agents).
        agents, self.ref_lm = build_agents(cfg, lm)
        self.roles = Roles(agents)
        self.iteration = 0
        # Response lengths come from their own stream, seeded once (never re-seeded at a swap: docs/algorithm.md).
        self.length_rng = np.random.default_rng(cfg.seed if seed is None else seed)
        self.last_samples: list[dict] = []

    @property
    def agents(self) -> list[Agent]:
        return self.roles.agents

    def state_dict(self) -> dict:
        """Where the run stands between iterations (agents' state aside: see cory.rl.checkpoint), JSON-serialisable."""
        return {"iteration": self.iteration, "swapped": self.roles.swapped,
                "length_rng": self.length_rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.iteration = state["iteration"]
        self.roles.swapped = state["swapped"]
        self.length_rng.bit_generator.state = state["length_rng"]

    def save(self, directory: str | Path) -> list[Path]:
        """Each agent's weights as a plain transformers folder, directory/llm1 (and llm2 for CORY), with the tokenizer,
        its value head (value_head.safetensors) and its KL coefficient and score moments (agent_state.json); load one
        with `AutoModelForCausalLM.from_pretrained` (or cory.load_agent). Returns the folders."""
        folders = [Path(directory) / agent.name for agent in self.agents]
        for agent, folder in zip(self.agents, folders):
            agent.save(folder, self.tokenizer)
        return folders

    def step(self, queries: Sequence[str], answers: Sequence[str] | None = None) -> dict[str, float]:
        """One iteration of Algorithm 1 on a batch of distinct task queries (ppo.queries_per_batch of them, and as
        many answers or None); returns the metrics (see cory.rl.metrics). Each query is answered
        ppo.samples_per_query times, in consecutive rows."""
        self._check_batch(queries, answers)
        timer, k = PhaseTimer(self.agents[0].device), self.cfg.ppo.samples_per_query
        queries = [q for q in queries for _ in range(k)]
        answers = None if answers is None else [a for a in answers for _ in range(k)]
        with timer("generation"):
            rollouts = self._rollouts(queries)  # the pioneer answers, the observer sees its answer (lines 5-11)
        with timer("scoring"):
            task_scores, training_scores, keep = self._rewards(queries, rollouts, answers)  # lines 12-14, Eq. 4
        with timer("update"):
            metrics = self._update(rollouts, task_scores, training_scores, keep)  # one PPO step each (lines 15-16)
        self.last_samples = self._samples(queries, rollouts, task_scores, keep)
        swap = self._exchange_roles()  # Eq. 5
        metrics.update({f"timing/{k}": v for k, v in timer.totals.items()})
        metrics["timing/iteration"] = sum(timer.totals.values())
        metrics["swap"] = float(swap)
        metrics["iteration"] = float(self.iteration)
        self.iteration += 1
        return metrics

    def _check_batch(self, queries: Sequence[str], answers: Sequence[str] | None) -> None:
        """One ValueError line, before any work, where the batch is not what the config asks for."""
        ppo_cfg = self.cfg.ppo
        if isinstance(queries, str) or not isinstance(queries, Sequence):
            raise ValueError(f"Trainer.step: queries must be a list of strings, got a {type(queries).__name__}")
        if len(queries) != ppo_cfg.queries_per_batch:
            per_query = f" / ppo.samples_per_query {ppo_cfg.samples_per_query}" if ppo_cfg.samples_per_query > 1 else ""
            raise ValueError(f"Trainer.step: got {len(queries)} queries, expected ppo.queries_per_batch = "
                             f"{ppo_cfg.queries_per_batch} (ppo.batch_size {ppo_cfg.batch_size}{per_query})")
        if answers is not None and len(answers) != len(queries):
            raise ValueError(f"Trainer.step: got {len(answers)} answers for {len(queries)} queries (one per query, "
                             "or None)")

    def _rollouts(self, queries: list[str]) -> dict[str, Rollout]:
        """Each role's rollout: the pioneer answers the query (Alg. 1 line 5); with knowledge transfer (Eq. 3) the
        observer sees the query and the pioneer's response, else the pioneer's prompt. Both answer at one response
        length, drawn for the iteration."""
        cfg = self.cfg
        pioneer, observer = self.roles.pioneer, self.roles.observer
        lo, hi = cfg.ppo.generation.response_length
        max_new_tokens = int(self.length_rng.integers(lo, hi + 1))
        # ppo.dropout "trl": trl's train_minibatch leaves the policy in train mode, so once updated (from the second
        # iteration on, for both agents) it samples with dropout.
        dropout = cfg.ppo.dropout == "trl" and self.iteration > 0
        pioneer_prompts = [cfg.prompt_template.format(query=q) for q in queries]
        rollouts = {"pioneer": self._generate(pioneer, pioneer_prompts, max_new_tokens, dropout)}
        if observer is not None:
            prompts = (
                observer_prompts(cfg.cory.observer_template, queries, rollouts["pioneer"].responses)
                if cfg.cory.knowledge_transfer
                else pioneer_prompts
            )
            rollouts["observer"] = self._generate(observer, prompts, max_new_tokens, dropout)
        return rollouts

    def _rewards(self, queries, rollouts: dict[str, Rollout], answers
                 ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]:
        """(task scores, training scores, kept samples): each response scored as an answer to the raw query (Alg. 1
        lines 12-13), 0 where a sample is dropped; the training score of each role is the collective reward (Eq. 4),
        r_self + c * r_partner, or the task score alone for PPO."""
        task_scores = self._score(queries, rollouts, answers)
        keep = self._finite_samples(queries, rollouts, task_scores)
        task_scores = {role: torch.where(keep, s, 0.0) for role, s in task_scores.items()}  # (B,), 0 if dropped
        if self.roles.observer is None:
            return task_scores, dict(task_scores), keep
        c = self.cfg.cory.partner_reward_coef
        training_scores = {
            "pioneer": collective_reward(task_scores["pioneer"], task_scores["observer"], c),
            "observer": collective_reward(task_scores["observer"], task_scores["pioneer"], c),
        }
        return task_scores, training_scores, keep

    def _update(self, rollouts: dict[str, Rollout], task_scores: dict[str, torch.Tensor],
                training_scores: dict[str, torch.Tensor], keep: torch.Tensor) -> dict[str, float]:
        """Each agent's own PPO step on its own buffer (Alg. 1 lines 15-16); returns its metrics under its identity
        and its role."""
        metrics: dict[str, float] = {}
        for role, agent in (("pioneer", self.roles.pioneer), ("observer", self.roles.observer)):
            if agent is None:
                continue
            beta = agent.kl_ctl.value
            try:
                exp = make_experience(agent, self.ref_lm, rollouts[role], training_scores[role],
                                      None if bool(keep.all()) else keep)
                stats = ppo_update(agent, exp)
            except NonFiniteError as exc:
                raise NonFiniteError(f"iteration {self.iteration}, {agent.name} as {role}: {exc}") from None
            stats["dropped_samples"] = float((~keep).sum())
            role_stats = self._role_metrics(exp, stats, task_scores[role][keep], training_scores[role][keep], beta)
            role_stats["role"] = 0.0 if role == "pioneer" else 1.0
            for key, value in role_stats.items():
                metrics[f"{agent.name}/{key}"] = value
                if key != "role":
                    metrics[f"{role}/{key}"] = value
        return metrics

    def _exchange_roles(self) -> bool:
        """Exchange the roles every T_REx iterations (Eq. 5): swap references, each agent keeping its own state
        (unless cory.reset_on_exchange, the official code's reset). Returns whether it swapped."""
        cfg = self.cfg
        swap = (self.roles.observer is not None and cfg.cory.role_exchange
                and exchange_due(self.iteration, cfg.cory.role_exchange_period))
        if swap:
            self.roles.exchange()
            if cfg.cory.reset_on_exchange:
                for agent in self.agents:
                    agent.reset_training_state()
        return swap

    def _score(self, queries, rollouts: dict[str, Rollout], answers) -> dict[str, torch.Tensor]:
        """Each role's (B,) task scores, from one call of the reward for all roles: a classifier reward (IMDB's) then
        scores the pioneer's and the observer's texts in one pass instead of one per role."""
        roles = list(rollouts)
        scores = self.reward_fn(queries * len(roles), [text for role in roles for text in rollouts[role].responses],
                                None if answers is None else answers * len(roles))
        scores = check_scores(scores, len(queries) * len(roles)).float()
        return dict(zip(roles, scores.split(len(queries))))

    def _finite_samples(self, queries, rollouts: dict[str, Rollout], scores: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B,) bool: the samples whose task scores (every role's: a CORY sample's reward is the pair's) are finite.
        With ppo.on_nonfinite: error, any non-finite score stops the run here, naming the iteration and a response."""
        finite = torch.stack([torch.isfinite(s) for s in scores.values()]).all(0)
        if bool(finite.all()):
            return finite
        bad_role = next(role for role, s in scores.items() if not bool(torch.isfinite(s).all()))
        i = int((~torch.isfinite(scores[bad_role])).nonzero()[0])
        where = (f"{int((~finite).sum())} of {len(finite)} samples; first: the {bad_role}'s answer "
                 f"{rollouts[bad_role].responses[i]!r} to {queries[i]!r} scored {scores[bad_role][i].item()}")
        if self.cfg.ppo.on_nonfinite == "error":
            raise NonFiniteError(f"iteration {self.iteration}: the task reward returned a non-finite score for {where} "
                                 "(ppo.on_nonfinite: skip drops such samples instead)")
        keep = whole_groups(finite, self.cfg.ppo.samples_per_query)
        if not bool(keep.any()):
            raise NonFiniteError(f"iteration {self.iteration}: no sample left with a finite task score ({where})")
        return keep

    def generate_alone(self, queries: Sequence[str], answers: Sequence[str] | None, iteration: int,
                       source: str = "a logged sample", agent: int = 0) -> list[dict]:
        """LLM1 used alone, with the pioneer prompt and the longest response length, scored by the task reward:
        the before/after generations of the paper's Table 3 (and the probe's, `source` saying which). A score that
        is not finite stops the run naming the iteration, LLM1 and `source` (ppo.on_nonfinite: error), or is None
        (skip: null in samples.jsonl, left out of the probe's mean). `agent` 1: LLM2 alone instead."""
        if not queries:
            return []
        llm1 = self.agents[agent]
        prompts = [self.cfg.prompt_template.format(query=q) for q in queries]
        rollout = self._generate(llm1, prompts, self.cfg.ppo.generation.response_length[1])
        scores = [float(s) for s in check_scores(self.reward_fn(queries, rollout.responses, answers), len(queries))]
        bad = [i for i, s in enumerate(scores) if not math.isfinite(s)]
        if bad and self.cfg.ppo.on_nonfinite == "error":
            i = bad[0]
            raise NonFiniteError(f"iteration {iteration}, {llm1.name} alone ({source}): the task reward returned a "
                                 f"non-finite score for {len(bad)} of {len(scores)} samples; first: the answer "
                                 f"{rollout.responses[i]!r} to {queries[i]!r} scored {scores[i]} (ppo.on_nonfinite: "
                                 "skip logs such a score as null instead)")
        return [
            {"iteration": iteration, "query": q, "pioneer_agent": llm1.name, "pioneer_prompt": p,
             "pioneer_response": r, "pioneer_score": s if math.isfinite(s) else None}
            for q, p, r, s in zip(queries, prompts, rollout.responses, scores)
        ]

    def probe(self, queries: Sequence[str], answers: Sequence[str] | None) -> dict[str, float]:
        """llm1/probe_task_reward: LLM1 alone on fixed `queries`, cfg.probe_samples answers each
        (TrainConfig.probe_every).
        It samples from a fork of the RNG state, so a run with the probe trains exactly as one without it."""
        k = self.cfg.probe_samples
        queries = [q for q in queries for _ in range(k)]
        answers = None if answers is None else [a for a in answers for _ in range(k)]
        device = self.agents[0].device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            rows = self.generate_alone(queries, answers, self.iteration, source="the probe")
        scores = [row["pioneer_score"] for row in rows if row["pioneer_score"] is not None]  # None: skipped, not finite
        return {f"{self.agents[0].name}/probe_task_reward": float(np.mean(scores)) if scores else None}

    def _generate(self, agent: Agent, prompts: list[str], max_new_tokens: int, dropout: bool = False) -> Rollout:
        ppo_cfg = self.cfg.ppo
        agent.activate()
        # at most a training batch at a time, and at a training batch's shape (see generate): the logged samples and
        # the probe reuse the decoding step the training batches compiled
        try:
            return generate(agent.compute_lm, self.tokenizer, prompts, ppo_cfg.generation, max_new_tokens,
                            ppo_cfg.batch_size, mixed_precision=ppo_cfg.speed.autocast, dropout=dropout)
        except NonFiniteError as exc:
            role = "pioneer" if agent is self.roles.pioneer else "observer"
            raise NonFiniteError(f"iteration {self.iteration}, {agent.name} as {role}: {exc}") from None

    def _role_metrics(
        self, exp: Experience, stats: dict[str, float], task: torch.Tensor, training: torch.Tensor, beta: float
    ) -> dict[str, float]:
        mask = exp.mask.float()
        kl = exp.kl.sum(1).mean().item()  # exact KL, summed over the response, batch mean
        task_reward = task.mean().item()
        responses = exp.rollout.responses
        return {
            "task_reward": task_reward,
            "kl": kl,
            "combined_reward": task_reward - self.cfg.eta * kl,
            "training_score": training.mean().item(),
            "kl_penalty": (-beta * exp.kl_penalty.sum(1)).mean().item(),
            "entropy": ppo.masked_mean(exp.entropy, mask).item(),
            "response_length": mask.sum(1).mean().item(),
            "distinct_1": distinct_n(responses, 1),
            "distinct_2": distinct_n(responses, 2),
            **stats,
        }

    def _samples(self, queries, rollouts: dict[str, Rollout], scores: dict[str, torch.Tensor], keep: torch.Tensor
                 ) -> list[dict]:
        """The iteration's logged generations; a dropped sample's score (not finite, ppo.on_nonfinite: skip) is None."""
        rows, kept = [], keep.tolist()
        k = self.cfg.ppo.samples_per_query  # one attempt per query: the first of each group
        for i in list(range(0, len(queries), k))[: self.cfg.samples_to_log]:
            row = {"iteration": self.iteration, "query": queries[i]}
            for role, rollout in rollouts.items():
                agent = self.roles.pioneer if role == "pioneer" else self.roles.observer
                row[f"{role}_agent"] = agent.name
                row[f"{role}_prompt"] = rollout.prompts[i]
                row[f"{role}_response"] = rollout.responses[i]
                row[f"{role}_score"] = float(scores[role][i]) if kept[i] else None
            rows.append(row)
        return rows


class PhaseTimer:
    """Wall-clock seconds per phase; synchronises the GPU so asynchronous kernels are charged to their phase."""

    def __init__(self, device: torch.device):
        self.cuda = torch.device(device).type == "cuda"
        self.totals: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        if self.cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            yield
            if self.cuda:
                torch.cuda.synchronize()  # where an asynchronous kernel's error surfaces: within its phase
        except Exception as exc:
            if getattr(exc, "phase", None) is None:
                exc.phase = name  # the innermost phase it failed in, which a failed run's one line names
            raise
        self.totals[name] = self.totals.get(name, 0.0) + time.perf_counter() - start
