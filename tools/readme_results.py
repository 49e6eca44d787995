"""README.md's results table, from the committed run's headline metrics (outputs/default/metrics/headline.json).

    python -m tools.readme_results            # rewrite the table between README's results markers
    python -m tools.readme_results --check    # exit 1 if README's table is not the one headline.json gives

The table is the README's only copy of a result: writing it by hand would let it drift from the run it quotes
(tests/test_readme.py checks it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- results:start -->", "<!-- results:end -->"

ROWS = (  # (row label, headline key of the run, agent, pass@k model)
    ("base", None, None, "base"),
    ("PPO", "ppo", "llm1", "ppo"),
    ("PPO-2x", "ppo_2x", "llm1", None),
    ("CORY-LLM1", "cory", "llm1", "cory_llm1"),
    ("CORY-LLM2", "cory", "llm2", "cory_llm2"),
)
PRETRAINED = (("SmolLM2 PPO", "ppo", "llm1"), ("SmolLM2 CORY-LLM1", "cory", "llm1"),
              ("SmolLM2 CORY-LLM2", "cory", "llm2"))


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:#.3g}".rstrip(".")


def table(headline: dict) -> str:
    """The block between the markers: one row per model, IMDB and math final values and pass@k."""
    passk = headline.get("passk", {})
    ks = sorted({int(k.split("@")[1]) for model in passk.values() for k in model}) or [1]
    low, high = f"pass@{ks[0]}", f"pass@{ks[-1]}"
    lines = [f"| model | IMDB task reward | IMDB KL | math task reward | math KL | math {low} | math {high} |",
             "|---|---|---|---|---|---|---|"]

    def final(group: str, run: str | None, agent: str | None, key: str) -> float | None:
        return headline.get(group, {}).get(run or "", {}).get(agent or "", {}).get(key)

    for label, run, agent, model in ROWS:
        cells = [final("imdb", run, agent, "task_reward"), final("imdb", run, agent, "kl"),
                 final("math", run, agent, "task_reward"), final("math", run, agent, "kl"),
                 passk.get(model or "", {}).get(low), passk.get(model or "", {}).get(high)]
        lines.append(f"| {label} | " + " | ".join(_cell(c) for c in cells) + " |")
    for label, run, agent in PRETRAINED:
        if final("imdb_smollm2", run, agent, "kl") is not None:
            lines.append(f"| {label} | {_cell(final('imdb_smollm2', run, agent, 'task_reward'))} | "
                         f"{_cell(final('imdb_smollm2', run, agent, 'kl'))} | | | | |")
    reward, perplexity = headline.get("reward_model", {}), headline.get("perplexity", {})
    lines += ["", "Final values (the mean of a run's last `report.last_n` iterations), averaged over its seeds, from",
              "`outputs/default/metrics/headline.json`. Task reward: the classifier's positive logit (IMDB), the share of",
              "correct answers (math); KL: summed over the response."]
    if "accuracy" in reward or perplexity:
        lines.append(" ".join(
            ([f"Reward model held-out accuracy {reward['accuracy']:.3f}."] if "accuracy" in reward else [])
            + ([("Validation perplexity " + ", ".join(f"{name} {_cell(value)}" for name, value in
                                                     sorted(perplexity.items())) + ".")] if perplexity else [])))
    return "\n".join(lines)


def rewrite(readme: str, headline: dict) -> str:
    if START not in readme or END not in readme:
        raise SystemExit(f"README.md: no {START} ... {END} block")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(headline)}\n{END}{tail}"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that README.md's table is up to date")
    args = parser.parse_args(argv)
    readme_path = ROOT / "README.md"
    headline = json.loads((ROOT / "outputs/default/metrics/headline.json").read_text())
    readme = readme_path.read_text()
    new = rewrite(readme, headline)
    if args.check:
        if new != readme:
            raise SystemExit("README.md: the results table is not headline.json's: python -m tools.readme_results")
        return
    readme_path.write_text(new)


if __name__ == "__main__":
    main(sys.argv[1:])
