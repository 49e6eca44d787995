"""samples.md, the paper's Table 3 analogue: each base model's continuations, LLM1's answers before and after RL on
the fixed queries, and, for each IMDB group whose runs logged them, the held-out queries (tasks.<task>.held_out)
answered side by side by the base model, PPO and each CORY agent alone. Generated from the runs' samples.jsonl."""

from __future__ import annotations

from cory.report.cells import _num, table
from cory.report.config import ReportConfig
from cory.report.results import Inputs, Run
from cory.tasks.imdb import TABLE3_QUERIES


def _llm1_generation(row: dict) -> tuple[str, float, str]:
    """(response, score, role) of LLM1 in one samples.jsonl row, whichever role it played."""
    role = "pioneer" if row.get("pioneer_agent", "llm1") == "llm1" else "observer"
    return row[f"{role}_response"], row[f"{role}_score"], role


def _pick(rows: list[dict], n: int) -> list[dict]:
    """The paper's Table 3 snippets first (if a run logged them), then the rows in order."""
    first = [r for r in rows if r["query"].strip().startswith(TABLE3_QUERIES)]
    return (first + [r for r in rows if r not in first])[:n]


def _score(x) -> str:
    return "n/a" if x is None else _num(float(x))


def before_after(run: Run, n: int) -> list[str]:
    """LLM1's answers on the fixed queries before training (the first logged iteration) and after (the last)."""
    seed = run.seeds[0]
    rows = [r for r in run.samples if not r.get("held_out")]
    iterations = sorted({r["iteration"] for r in rows})
    lines = [f"## {run.name} (seed {seed}), LLM1", ""]
    generations = []
    for it, when in ((iterations[0], "before"), (iterations[-1], "after")):
        for row in _pick([r for r in rows if r["iteration"] == it], n):
            response, score, role = _llm1_generation(row)
            generations.append([f"{when} (iteration {it})", role, row["query"], response, _score(score)])
    return lines + table(["when", "role", "query", "LLM1 response", "task reward"], generations) + [""]


def held_out(run: Run, seed: int, when: str) -> dict[tuple[str, str], dict]:
    """(query, agent) -> the held-out answer of that seed, before training ("before") or after it ("after")."""
    rows = [r for r in run.samples_by_seed.get(seed, []) if r.get("held_out")]
    if not rows:
        return {}
    it = min(r["iteration"] for r in rows) if when == "before" else max(r["iteration"] for r in rows)
    return {(r["query"], r["pioneer_agent"]): r for r in rows if r["iteration"] == it}


def side_by_side(group: str, runs: dict[str, Run]) -> list[str]:
    """The held-out queries of one IMDB group answered by the base model (PPO's seed before training), PPO and each
    CORY agent alone after training, on the first seed both runs ran."""
    ppo, cory = runs["ppo"], runs["cory"]
    seeds = sorted(set(ppo.seeds) & set(cory.seeds))
    if not seeds or not held_out(ppo, seeds[0], "after"):
        return [f"## `{group}`: held-out queries", "",
                "Its runs logged no held-out answers (tasks.<task>.held_out is 0).", ""]
    seed = seeds[0]
    base, ppo_end, cory_end = held_out(ppo, seed, "before"), held_out(ppo, seed, "after"), held_out(cory, seed, "after")
    queries = list(dict.fromkeys(q for q, _ in ppo_end))
    rows = []
    for q in queries:
        cells = [q]
        for answers, agent in ((base, "llm1"), (ppo_end, "llm1"), (cory_end, "llm1"), (cory_end, "llm2")):
            row = answers.get((q, agent))
            cells.append("-" if row is None else f"{row['pioneer_response']} ({_score(row['pioneer_score'])})")
        rows.append(cells)
    scores = {name: [r["pioneer_score"] for (q, a), r in answers.items() if a == agent and r["pioneer_score"]
                     is not None] for name, answers, agent in (("base", base, "llm1"), ("PPO", ppo_end, "llm1"),
                                                               ("CORY-LLM1", cory_end, "llm1"),
                                                               ("CORY-LLM2", cory_end, "llm2"))}
    mean = ", ".join(f"{name} {sum(v) / len(v):.3g}" if v else f"{name} n/a" for name, v in scores.items())
    return [f"## `{group}`: {len(queries)} held-out queries, seed {seed}", "",
            "Prompts never drawn for training (the last tasks.<task>.held_out of the prompt file), each answered alone "
            "with the pioneer prompt at the longest response length: by the base model (before training), PPO and "
            f"each CORY agent after training; task reward in brackets. Mean task reward: {mean}.", "",
            *table(["query", "base model", f"{ppo.name}", f"{cory.name} LLM1", f"{cory.name} LLM2"], rows), ""]


def samples_markdown(inputs: Inputs, cfg: ReportConfig) -> str:
    """The Table 3 analogue: the base models' samples, LLM1's generations before and after training on the fixed
    queries, and the held-out queries side by side for each IMDB group."""
    lines = ["# Generations before and after RL fine-tuning (the paper's Table 3 analogue)", "",
             "Each run logs LLM1 used alone (pioneer prompt) on the same fixed queries before training (iteration -1: "
             "the base model) and after its last iteration; for IMDB these are the paper's Table 3 snippets.", ""]
    for name, rows in inputs.base_samples.items():
        lines += [f"## Base model `{name}` (samples/base_models/{name}.json)", ""]
        rows = [[row["prompt"], row["continuation"]] for row in rows[: cfg.samples]]
        lines += table(["prompt", "continuation"], rows) + [""]
    for group in ("imdb", "math"):
        for name in ("ppo", "cory"):
            run = inputs.runs.get(group, {}).get(name)
            if run is not None:
                lines += before_after(run, cfg.samples)
    for group, runs in inputs.runs.items():
        if group != "math" and "ppo" in runs and "cory" in runs:
            lines += side_by_side(group, runs)
    return "\n".join(lines)

