"""Test projects: the default and full profiles' params trees, a profiles folder with one profile of its own beside the default,
and a profile "t" of toy data and tiny models for the base_models stage (`project`, which asks for tiny.tok: a test
module that uses it imports both)."""

import pytest

from pipeline.paths import ROOT
from pipeline.profile import render

from tiny import toy_sentiment


@pytest.fixture(scope="module")
def default():
    return render("default")


@pytest.fixture(scope="module")
def full():
    """The full profile's tree: the default's groups and every other kind (the scratch ablations, the sweeps)."""
    return render("full")


def write_profiles(folder, overlay: str):
    folder.mkdir()
    (folder / "default.yaml").write_text((ROOT / "profiles" / "default.yaml").read_text())
    (folder / "mine.yaml").write_text(overlay)


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
